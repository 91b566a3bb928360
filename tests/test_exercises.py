"""tfmini.exercises: every reference passes, every stub is "not attempted yet", and plausible wrong
implementations of each piece are rejected with a verdict that names the symptom."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tfmini
from tfmini import exercises as ex


def verdict(capsys, name, fn):
    """check's return value and its printed verdict, with the wrapped lines joined again."""
    ok = ex.check(name, fn)
    out = capsys.readouterr().out
    assert all(len(line) <= ex.WIDTH for line in out.splitlines()), out   # fits a page's column
    return ok, " ".join(out.split())


def reference(name):
    namespace = {}
    exec(ex._solution_source(name), namespace)
    return namespace[ex.signature(name).split("(")[0]]


# ---- wrong implementations, by exercise: (label, function, phrase the verdict must contain) -----

def _lstm(order="ifgo", g_act=torch.tanh, tanh_c=True, new_c=True, swap_out=False, both_biases=True):
    def lstm_step(x, h, c, W_ih, W_hh, b_ih, b_hh):
        gates = x @ W_ih.T + b_ih + h @ W_hh.T + (b_hh if both_biases else 0)
        parts = dict(zip(order, gates.chunk(4, dim=-1)))
        i, f, g, o = torch.sigmoid(parts["i"]), torch.sigmoid(parts["f"]), g_act(parts["g"]), torch.sigmoid(parts["o"])
        c2 = f * c + i * g
        h2 = o * (torch.tanh(c2 if new_c else c) if tanh_c else c2)
        return (c2, h2) if swap_out else (h2, c2)
    return lstm_step


def _additive(kind):
    def additive_score(Q, K, W_q, W_k, b, w):
        pre = (Q @ W_q)[:, :, None, :] + (K @ W_k)[:, None, :, :]
        if kind == "no_tanh":
            return (pre + b) @ w
        if kind == "bias_outside":
            return torch.tanh(pre) @ w + b.sum()
        if kind == "sum":
            return torch.tanh(pre + b).sum(-1)
        if kind == "tanh_after":
            return torch.tanh((pre + b) @ w)
        if kind == "transposed":
            return (torch.tanh(pre + b) @ w).transpose(1, 2)
        raise AssertionError(kind)
    return additive_score


def _masked_softmax(kind):
    def masked_softmax(scores, mask):
        if kind == "polarity":
            return scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(-1).masked_fill(mask, 0.0)
        if kind == "neg_inf":
            return scores.masked_fill(~mask, float("-inf")).softmax(-1)
        if kind == "no_zeroing":
            return scores.masked_fill(~mask, -1e9).softmax(-1)
        if kind == "wrong_axis":
            return scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-2).masked_fill(~mask, 0.0)
        if kind == "after":
            return scores.softmax(-1) * mask
        if kind == "ignored":
            return scores.softmax(-1)
        if kind == "fp16_overflow":
            return scores.masked_fill(~mask, -1e9).softmax(-1).masked_fill(~mask, 0.0)
        raise AssertionError(kind)
    return masked_softmax


def _attention(kind):
    def attention(q, k, v, mask=None):
        d_k, d_v = q.shape[-1], v.shape[-1]
        scale = {"no_scale": 1.0, "d_k": d_k, "d_v": math.sqrt(d_v)}.get(kind, math.sqrt(d_k))
        scores = q @ k.transpose(-2, -1) / scale
        m = mask
        if m is not None and kind == "polarity":
            m = ~m
        if kind == "neg_inf" and m is not None:
            weights = scores.masked_fill(~m, float("-inf")).softmax(-1)
        else:
            weights = tfmini.masked_softmax(scores, m, dim=-2 if kind == "queries" else -1)
            if kind == "queries" and m is not None:
                weights = torch.softmax(scores.masked_fill(~m, torch.finfo(scores.dtype).min), -2)
        return weights @ v, weights
    return attention


def _split(kind):
    def split_heads(x, num_heads):
        B, T, D = x.shape
        Dh = D // num_heads
        if kind == "no_transpose_reshape":
            return x.reshape(B, num_heads, T, Dh)
        if kind == "interleaved":
            return x.reshape(B, T, Dh, num_heads).permute(0, 3, 1, 2)
        if kind == "missing_transpose":
            return x.reshape(B, T, num_heads, Dh)
        if kind == "heads_first":
            return x.reshape(B, T, num_heads, Dh).permute(2, 0, 1, 3)
        if kind == "transpose_last":
            return x.reshape(B, T, num_heads, Dh).transpose(1, 3)
        raise AssertionError(kind)
    return split_heads


def _merge(kind):
    def merge_heads(x):
        B, H, T, Dh = x.shape
        if kind == "no_transpose":
            return x.reshape(B, T, H * Dh)
        if kind == "wrong_order":
            return x.permute(0, 2, 3, 1).reshape(B, T, H * Dh)
        if kind == "sum":
            return x.sum(1)
        if kind == "mean":
            return x.mean(1)
        if kind == "cat_positions":
            return torch.cat(x.unbind(1), dim=1)
        if kind == "reversed":
            return x.flip(1).transpose(1, 2).reshape(B, T, H * Dh)
        raise AssertionError(kind)
    return merge_heads


def _sinusoidal(kind):
    def sinusoidal(max_len, d):
        p = torch.arange(max_len, dtype=torch.float64)[:, None] + (1 if kind == "from_one" else 0)
        i = torch.arange(d // 2, dtype=torch.float64)
        expo = {"i_over_d": i / d, "positive": -2 * i / d}.get(kind, 2 * i / d)
        angle = p / 10000.0 ** expo
        a, b = (angle.cos(), angle.sin()) if kind == "swapped" else (angle.sin(), angle.cos())
        if kind == "halves":
            return torch.cat([a, b], -1).float()
        return torch.stack([a, b], -1).flatten(1).float()
    return sinusoidal


def _layer_norm(kind):
    def layer_norm(x, gamma, beta, eps=1e-5):
        dim = 0 if kind == "axis" else -1
        mu = x.mean(dim, keepdim=True)
        var = x.var(dim, unbiased=(kind == "unbiased"), keepdim=True)
        if kind == "eps_outside":
            return gamma * (x - mu) / (var.sqrt() + eps) + beta
        if kind == "no_centring":
            return gamma * x / torch.sqrt(var + eps) + beta
        if kind == "swapped":
            return beta * (x - mu) / torch.sqrt(var + eps) + gamma
        if kind == "no_beta":
            return gamma * (x - mu) / torch.sqrt(var + eps)
        return gamma * (x - mu) / torch.sqrt(var + eps) + beta
    return layer_norm


def _causal(kind):
    def causal_mask(T, S=None):
        S = T if S is None else S
        ones = torch.ones(T, S, dtype=torch.bool)
        if kind == "transposed":
            return ones.triu(S - T)
        if kind == "strict":
            return ones.tril(S - T - 1)
        if kind == "polarity":
            return ~ones.tril(S - T)
        if kind == "no_offset":
            return ones.tril(0)
        if kind == "float":
            return torch.ones(T, S).tril(S - T)
        if kind == "all":
            return ones
        raise AssertionError(kind)
    return causal_mask


def _padding(kind):
    def padding_mask(ids, pad_id):
        if kind == "polarity":
            return (ids == pad_id)[:, None, None, :]
        if kind == "flat":
            return ids != pad_id
        if kind == "queries":
            return (ids != pad_id)[:, None, :, None]
        if kind == "zero":
            return (ids != 0)[:, None, None, :]
        if kind == "greater":
            return (ids > pad_id)[:, None, None, :]
        if kind == "int":
            return (ids != pad_id)[:, None, None, :].long()
        raise AssertionError(kind)
    return padding_mask


def _cross(kind):
    def cross_attention(x, memory, memory_pad, W_Q, W_K, W_V, W_O, num_heads):
        B, T, D = x.shape
        kv = x if kind == "kv_from_x" else memory
        S = kv.shape[1]
        q = (x @ W_Q).reshape(B, T, num_heads, -1).transpose(1, 2)
        k = (kv @ W_K).reshape(B, S, num_heads, -1).transpose(1, 2)
        v = (kv @ W_V).reshape(B, S, num_heads, -1).transpose(1, 2)
        if kind == "no_scale":
            q = q * math.sqrt(q.shape[-1])
        mask = memory_pad[:, None, None, :]
        if kind == "polarity":
            mask = ~mask
        if kind == "no_mask":
            mask = None
        if kind == "causal":
            mask = mask & torch.ones(T, S, dtype=torch.bool).tril()
        heads, w = tfmini.scaled_dot_product_attention(q, k, v, mask)
        if kind == "merge_order":
            out = heads.permute(0, 2, 3, 1).reshape(B, T, -1)
        else:
            out = heads.transpose(1, 2).reshape(B, T, -1)
        return out @ W_O, w
    return cross_attention


def _greedy(kind):
    def greedy(step, ys, max_new_tokens, eos_id, pad_id):
        start, prompt = ys.shape[1], ys
        done = torch.zeros(ys.shape[0], dtype=torch.bool)
        for _ in range(max_new_tokens - (1 if kind == "one_short" else 0)):
            logits = step(prompt if kind == "no_feedback" else ys)
            nxt = logits.argmin(-1) if kind == "argmin" else logits.argmax(-1)
            if kind != "no_pad":
                nxt = nxt.masked_fill(done, pad_id)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if kind == "any" and done.any() or kind != "never_stop" and kind != "any" and done.all():
                break
        return ys if kind == "with_prefix" else ys[:, start:]
    return greedy


def _kv(kind):
    def kv_cache_step(q, k, v, cache_k, cache_v, t):
        pos = t + 1 if kind == "off_by_one" else t
        if kind == "swap_kv":
            cache_k[:, :, pos], cache_v[:, :, pos] = v[:, :, 0], k[:, :, 0]
        elif kind == "not_in_place":
            cache_k, cache_v = cache_k.clone(), cache_v.clone()
            cache_k[:, :, pos], cache_v[:, :, pos] = k[:, :, 0], v[:, :, 0]
        else:
            cache_k[:, :, pos], cache_v[:, :, pos] = k[:, :, 0], v[:, :, 0]
        end = {"exclude_self": t, "whole": cache_k.shape[2]}.get(kind, t + 1)
        keys, values = cache_k[:, :, :end], cache_v[:, :, :end]
        scale = 1.0 if kind == "no_scale" else math.sqrt(q.shape[-1])
        return torch.softmax(q @ keys.transpose(-2, -1) / scale, -1) @ values
    return kv_cache_step


def _beam(kind):
    def beam_step(ys, scores, logp):
        B, K, V = logp.shape
        cand = logp if kind == "no_add" else scores[:, :, None] + logp
        if kind == "per_beam":
            best, tok = cand.max(-1)
            new, order = best.sort(-1, descending=True)
            beam, token = order, tok.gather(1, order)
        elif kind == "whole_batch":
            new, idx = cand.reshape(-1).topk(B * K)
            new, idx = new.reshape(B, K), idx.reshape(B, K)
            batch, beam, token = idx // (K * V), idx % (K * V) // V, idx % V
            return torch.cat([ys[batch, beam], token[:, :, None]], -1), new
        else:
            new, idx = cand.reshape(B, K * V).topk(K, dim=-1)
            beam, token = (idx % V, idx // V) if kind == "swapped" else (idx // V, idx % V)
        if kind == "probabilities":
            new = scores.exp().gather(1, beam) * logp.exp().reshape(B, K * V).gather(1, beam * V + token)
        pre = ys if kind == "no_reorder" else ys.gather(1, beam[:, :, None].expand(-1, -1, ys.shape[2]))
        return torch.cat([pre, token[:, :, None]], -1), new
    return beam_step


def _bpe(kind):
    def bpe_merge(ids, pair, new_id):
        if kind == "overlap":
            out = [new_id if (a, b) == tuple(pair) else a for a, b in zip(ids, ids[1:])]
            return out + ids[-1:] if not ids or len(ids) < 2 or (ids[-2], ids[-1]) != tuple(pair) else out
        if kind == "right_to_left":
            out, i = [], len(ids) - 1
            while i >= 0:
                if i > 0 and (ids[i - 1], ids[i]) == tuple(pair):
                    out.append(new_id)
                    i -= 2
                else:
                    out.append(ids[i])
                    i -= 1
            return out[::-1]
        if kind == "first_only":
            for i in range(len(ids) - 1):
                if (ids[i], ids[i + 1]) == tuple(pair):
                    return ids[:i] + [new_id] + ids[i + 2:]
            return list(ids)
        if kind == "drop_last":
            out, i = [], 0
            while i < len(ids) - 1:
                if (ids[i], ids[i + 1]) == tuple(pair):
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            return out
        if kind == "in_place":
            i = 0
            while i < len(ids) - 1:
                if (ids[i], ids[i + 1]) == tuple(pair):
                    ids[i:i + 2] = [new_id]
                i += 1
            return ids
        if kind == "unordered":
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and sorted((ids[i], ids[i + 1])) == sorted(pair):
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            return out
        raise AssertionError(kind)
    return bpe_merge


def _rope(kind):
    def apply_rope(x, positions, theta=10000.0):
        Dh = x.shape[-1]
        if kind == "ignore_theta":
            theta = 10000.0
        i = torch.arange(Dh // 2, dtype=torch.float64)
        inv = theta ** (-(i if kind == "i_over_d" else 2 * i) / Dh)
        angle = (positions.double()[:, None] + (1 if kind == "from_one" else 0)) * inv
        if kind == "fp16_angles":
            angle = positions.to(x.dtype)[:, None] * inv.to(x.dtype)
        if kind == "interleaved":
            a = angle.repeat_interleave(2, -1)
            x1, x2 = x[..., 0::2], x[..., 1::2]
            rot = torch.stack([-x2, x1], -1).flatten(-2)
            return x * a.cos().to(x.dtype) + rot * a.sin().to(x.dtype)
        a = torch.cat([angle, angle], -1)
        x1, x2 = x.chunk(2, -1)
        rot = torch.cat([x2, -x1], -1) if kind == "wrong_sign" else torch.cat([-x2, x1], -1)
        cos, sin = a.cos().to(x.dtype), a.sin().to(x.dtype)
        if kind == "swapped":
            cos, sin = sin, cos
        return x * cos + rot * sin
    return apply_rope


def _rms(kind):
    def rms_norm(x, gamma, eps=1e-6):
        h = x if kind == "no_upcast" else x.float()
        if kind == "subtract_mean":
            h = h - h.mean(-1, keepdim=True)
        ms = h.pow(2).sum(-1, keepdim=True) if kind == "sum" else h.pow(2).mean(-1, keepdim=True)
        y = h / (ms.sqrt() + eps) if kind == "eps_outside" else h / torch.sqrt(ms + eps)
        if kind == "no_gamma":
            return y.to(x.dtype)
        if kind == "float32_out":
            return gamma.float() * y
        return gamma * y.to(x.dtype)
    return rms_norm


def _swiglu(kind):
    def swiglu(x, W_gate, W_1, W_2):
        a, b = x @ W_gate, x @ W_1
        if kind == "wrong_branch":
            return (a * F.silu(b)) @ W_2
        if kind == "sigmoid":
            return (torch.sigmoid(a) * b) @ W_2
        if kind == "relu":
            return (F.relu(a) * b) @ W_2
        if kind == "no_linear":
            return F.silu(a) @ W_2
        if kind == "both":
            return (F.silu(a) * F.silu(b)) @ W_2
        if kind == "added":
            return (F.silu(a) + b) @ W_2
        raise AssertionError(kind)
    return swiglu


def _gqa(kind):
    def gqa(x, W_q, W_k, W_v, W_o, H, G):
        B, T, _ = x.shape
        q = (x @ W_q).reshape(B, T, H, -1).transpose(1, 2)
        k = (x @ W_k).reshape(B, T, G, -1).transpose(1, 2)
        v = (x @ W_v).reshape(B, T, G, -1).transpose(1, 2)
        if kind == "tile":
            k, v = k.repeat(1, H // G, 1, 1), v.repeat(1, H // G, 1, 1)
        else:
            k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
        mask = {"no_mask": None, "transposed": torch.ones(T, T, dtype=torch.bool).triu()}.get(
            kind, tfmini.causal_mask(T))
        if kind == "no_scale":
            q = q * math.sqrt(q.shape[-1])
        out, _ = tfmini.scaled_dot_product_attention(q, k, v, mask)
        out = out.permute(0, 2, 3, 1) if kind == "merge_order" else out.transpose(1, 2)
        return out.reshape(B, T, -1) @ W_o
    return gqa


WRONG = {
    "lstm_step": [
        ("gates i, f, o, g", _lstm(order="ifog"), "wrong order"),
        ("gates f, i, g, o", _lstm(order="figo"), "you read the four chunks as f, i, g, o"),
        ("sigmoid candidate", _lstm(g_act=torch.sigmoid), "candidate g must go through tanh"),
        ("no tanh on c", _lstm(tanh_c=False), "tanh of the new cell state is missing"),
        ("old c in h", _lstm(new_c=False), "new cell state c', not the old c"),
        ("(c, h) returned", _lstm(swap_out=True), "h and c are swapped"),
        ("one bias", _lstm(both_biases=False), "a bias is missing"),
    ],
    "additive_score": [
        ("no tanh", _additive("no_tanh"), "tanh is missing"),
        ("bias outside tanh", _additive("bias_outside"), "bias b goes inside the tanh"),
        ("summed hidden", _additive("sum"), "projected by w"),
        ("tanh after w", _additive("tanh_after"), "tanh comes before the projection"),
        ("(B, S, T)", _additive("transposed"), "queries and keys are swapped"),
    ],
    "masked_softmax": [
        ("mask polarity", _masked_softmax("polarity"), "mask polarity reversed"),
        ("-inf fill", _masked_softmax("neg_inf"), "NaN in a fully masked row"),
        ("no zeroing", _masked_softmax("no_zeroing"), "fully masked row should get all-zero weights"),
        ("softmax over queries", _masked_softmax("wrong_axis"), "do not sum to 1 over the keys"),
        ("mask after softmax", _masked_softmax("after"), "mask the scores before the softmax"),
        ("mask ignored", _masked_softmax("ignored"), "the mask has no effect"),
        ("-1e9 in float16", _masked_softmax("fp16_overflow"), "does not fit in float16"),
    ],
    "attention": [
        ("no scale", _attention("no_scale"), "missing the scale"),
        ("scale d_k", _attention("d_k"), "divided by d_k = 64, not by sqrt(d_k) = 8"),
        ("scale sqrt(d_v)", _attention("d_v"), "divided by sqrt(d_v) = 4"),
        ("softmax over the queries", _attention("queries"), "softmax over the wrong axis"),
        ("mask polarity", _attention("polarity"), "mask polarity reversed"),
        ("-inf fill", _attention("neg_inf"), "NaN"),
    ],
    "split_heads": [
        ("reshape to (B, H, T, Dh)", _split("no_transpose_reshape"), "positions and heads are mixed"),
        ("interleaved columns", _split("interleaved"), "interleaved"),
        ("missing transpose", _split("missing_transpose"), "transpose is missing"),
        ("heads first", _split("heads_first"), "heads axis went first"),
        ("transpose(1, 3)", _split("transpose_last"), "expected shape (2, 2, 3, 4) (B, H, T, Dh), got (2, 4, 2, 3)"),
    ],
    "merge_heads": [
        ("no transpose", _merge("no_transpose"), "positions and heads are mixed"),
        ("heads merged in the wrong order", _merge("wrong_order"), "merged in the wrong order"),
        ("sum", _merge("sum"), "heads are summed"),
        ("mean", _merge("mean"), "heads are averaged"),
        ("cat along positions", _merge("cat_positions"), "along the positions"),
        ("reversed heads", _merge("reversed"), "reverse order"),
    ],
    "sinusoidal": [
        ("sin/cos swapped", _sinusoidal("swapped"), "sin and cos are swapped"),
        ("halves", _sinusoidal("halves"), "they interleave"),
        ("i/d", _sinusoidal("i_over_d"), "you used i/d"),
        ("positive exponent", _sinusoidal("positive"), "exponent has the wrong sign"),
        ("positions from 1", _sinusoidal("from_one"), "positions count from 0"),
    ],
    "layer_norm": [
        ("unbiased variance", _layer_norm("unbiased"), "unbiased"),
        ("eps outside sqrt", _layer_norm("eps_outside"), "eps goes inside the square root"),
        ("no centring", _layer_norm("no_centring"), "mean is not subtracted"),
        ("gamma/beta swapped", _layer_norm("swapped"), "gamma and beta are swapped"),
        ("no beta", _layer_norm("no_beta"), "beta is missing"),
        ("wrong axis", _layer_norm("axis"), "wrong axis"),
    ],
    "causal_mask": [
        ("transposed", _causal("transposed"), "the mask is transposed"),
        ("strict", _causal("strict"), "must see its own key"),
        ("polarity", _causal("polarity"), "polarity reversed"),
        ("no offset for S > T", _causal("no_offset"), "queries are the last T positions"),
        ("float mask", _causal("float"), "expected dtype torch.bool"),
        ("all ones", _causal("all"), "every key is allowed"),
    ],
    "padding_mask": [
        ("polarity", _padding("polarity"), "polarity reversed"),
        ("(B, S)", _padding("flat"), "add the head and query axes"),
        ("masks queries", _padding("queries"), "hides queries instead of keys"),
        ("compares with 0", _padding("zero"), "compare with pad_id, not with 0"),
        ("ids > pad_id", _padding("greater"), "use ids != pad_id"),
        ("int mask", _padding("int"), "expected dtype torch.bool"),
    ],
    "cross_attention": [
        ("keys from x", _cross("kv_from_x"), "must come from memory"),
        ("mask polarity", _cross("polarity"), "mask polarity reversed"),
        ("no mask", _cross("no_mask"), "padded source positions get weight"),
        ("causal cross", _cross("causal"), "no causal mask"),
        ("no scale", _cross("no_scale"), "missing the scale"),
        ("heads merged in the wrong order", _cross("merge_order"), "merged in the wrong order"),
    ],
    "greedy": [
        ("no feedback", _greedy("no_feedback"), "must see the tokens chosen so far"),
        ("no pad after EOS", _greedy("no_pad"), "must get pad_id"),
        ("stops at the first EOS", _greedy("any"), "stop only when every row has"),
        ("never stops early", _greedy("never_stop"), "did not stop"),
        ("returns the prefix", _greedy("with_prefix"), "return only the new tokens"),
        ("one token short", _greedy("one_short"), "one token too few"),
        ("argmin", _greedy("argmin"), "argmax"),
    ],
    "kv_cache_step": [
        ("off-by-one position", _kv("off_by_one"), "off-by-one cache position"),
        ("excludes the new key", _kv("exclude_self"), "see its own new key"),
        ("attends to the whole cache", _kv("whole"), "unwritten slots"),
        ("not in place", _kv("not_in_place"), "not updated in place"),
        ("k and v swapped", _kv("swap_kv"), "written into cache_"),
        ("no scale", _kv("no_scale"), "not scaled"),
    ],
    "beam_step": [
        ("idx % V and // swapped", _beam("swapped"), "idx // V"),
        ("scores not added", _beam("no_add"), "running score"),
        ("no reorder", _beam("no_reorder"), "prefixes were not reordered"),
        ("best token per beam", _beam("per_beam"), "all K*V candidates"),
        ("top-k over the whole batch", _beam("whole_batch"), "its own K hypotheses"),
        ("probabilities multiplied", _beam("probabilities"), "keep adding log-probabilities"),
    ],
    "bpe_merge": [
        ("overlapping pairs", _bpe("overlap"), "occurrences overlap"),
        ("right to left", _bpe("right_to_left"), "right to left"),
        ("first occurrence only", _bpe("first_only"), "only the first occurrence"),
        ("last token dropped", _bpe("drop_last"), "last token was lost"),
        ("changes its input", _bpe("in_place"), "changed its input list"),
        ("unordered pair", _bpe("unordered"), "the pair is ordered"),
    ],
    "apply_rope": [
        ("interleaved layout", _rope("interleaved"), "interleaved layout"),
        ("wrong rotation sign", _rope("wrong_sign"), "rotation goes the wrong way"),
        ("i/Dh frequencies", _rope("i_over_d"), "frequencies are wrong"),
        ("positions from 1", _rope("from_one"), "shifted by one"),
        ("cos/sin swapped", _rope("swapped"), "cos and sin are swapped"),
        ("theta ignored", _rope("ignore_theta"), "theta is ignored"),
        ("float16 angles", _rope("fp16_angles"), "lose precision"),
    ],
    "rms_norm": [
        ("subtracts the mean", _rms("subtract_mean"), "does not subtract the mean"),
        ("eps outside sqrt", _rms("eps_outside"), "eps goes inside the square root"),
        ("sum, not mean", _rms("sum"), "not of their sum"),
        ("no gamma", _rms("no_gamma"), "gamma is missing"),
        ("float16 without upcast", _rms("no_upcast"), "squares overflow"),
        ("float32 output for float16", _rms("float32_out"), "cast back"),
    ],
    "swiglu": [
        ("gate on the wrong branch", _swiglu("wrong_branch"), "SiLU is on the wrong branch"),
        ("sigmoid gate", _swiglu("sigmoid"), "uses sigmoid"),
        ("relu gate", _swiglu("relu"), "uses ReLU"),
        ("no linear branch", _swiglu("no_linear"), "linear branch x @ W_1 is missing"),
        ("silu on both", _swiglu("both"), "both branches"),
        ("added branches", _swiglu("added"), "multiplies them"),
    ],
    "gqa": [
        ("heads repeated in the wrong order", _gqa("tile"), "repeat_interleave"),
        ("no causal mask", _gqa("no_mask"), "causal mask is missing"),
        ("causal mask transposed", _gqa("transposed"), "causal mask is transposed"),
        ("no scale", _gqa("no_scale"), "not scaled"),
        ("heads merged in the wrong order", _gqa("merge_order"), "merged in the wrong order"),
    ],
}

CASES = [(name, label, fn, phrase) for name, wrongs in WRONG.items() for label, fn, phrase in wrongs]


def test_every_exercise_has_at_least_five_wrong_implementations():
    assert set(WRONG) == set(ex.names())
    assert all(len(w) >= 5 for w in WRONG.values()), {n: len(w) for n, w in WRONG.items()}


@pytest.mark.parametrize("name, label, fn, phrase", CASES, ids=[f"{n}-{label}" for n, label, _, _ in CASES])
def test_wrong_implementation_is_rejected_with_its_symptom(capsys, name, label, fn, phrase):
    from tfmini.exercises import _half_softmax
    if name == "masked_softmax" and "float16" in label and not _half_softmax():
        pytest.skip(f"torch {torch.__version__} has no float16 softmax on the CPU: the float16 case is not run")
    ok, out = verdict(capsys, name, fn)
    assert ok is False, out
    assert out.startswith("Not yet"), out
    assert phrase in out, out


@pytest.mark.parametrize("name", ex.names())
def test_reference_passes(capsys, name):
    ok, out = verdict(capsys, name, reference(name))
    assert ok is True, out
    assert out.startswith(f"Correct - {name}"), out


@pytest.mark.parametrize("name", ex.names())
def test_stub_is_not_attempted_yet(capsys, name):
    namespace = {}
    exec(ex.stub(name).replace("from tfmini.exercises import check, hint, solution", ""),
         {"check": ex.check, **namespace})
    out = capsys.readouterr().out
    assert all(len(line) <= ex.WIDTH for line in out.splitlines()), out
    out = " ".join(out.split())
    assert "not attempted yet" in out and "Traceback" not in out, out


def test_other_exceptions_are_reported_with_type_message_and_case(capsys):
    def attention(q, k, v, mask=None):
        return torch.softmax(q @ k / 8, -1) @ v, None  # k not transposed

    ok, out = verdict(capsys, "attention", attention)
    assert ok is False
    assert "RuntimeError" in out and "case 'B=2, T=3 queries" in out, out

    def greedy(step, ys, max_new_tokens, eos_id, pad_id):
        return step(ys.float())

    ok, out = verdict(capsys, "greedy", greedy)
    assert ok is False and "ValueError" in out and "expected the prefix ys as a long tensor" in out, out


def test_returning_none_is_named(capsys):
    ok, out = verdict(capsys, "swiglu", lambda x, W_gate, W_1, W_2: None)
    assert ok is False and "forget `return`" in out, out


def test_verdicts_are_deterministic(capsys):
    fn = _attention("no_scale")
    assert verdict(capsys, "attention", fn) == verdict(capsys, "attention", fn)


def test_names_hint_solution_signature_stub(capsys):
    names = ex.names()
    assert len(names) >= 19 and len(set(names)) == len(names)
    for required in ("lstm_step", "additive_score", "masked_softmax", "attention", "split_heads", "merge_heads",
                     "sinusoidal", "layer_norm", "causal_mask", "padding_mask", "cross_attention", "greedy",
                     "kv_cache_step", "beam_step", "bpe_merge", "apply_rope", "rms_norm", "swiglu", "gqa"):
        assert required in names
    for name in names:
        sig = ex.signature(name)
        assert sig.startswith(sig.split("(")[0] + "(") and "->" in sig.splitlines()[0]
        ex.hint(name)
        out = capsys.readouterr().out
        assert sig.splitlines()[0] in out and "Hint:" in out
        ex.solution(name)
        out = capsys.readouterr().out
        assert f"def {sig.split('(')[0]}(" in out and "_sol_" not in out
        assert "raise NotImplementedError" in ex.stub(name) and f"check({name!r}" in ex.stub(name)


def test_unknown_name_and_non_callable_raise_value_error():
    for call in (lambda: ex.check("atention", print), lambda: ex.hint("nope"), lambda: ex.solution("nope"),
                 lambda: ex.signature("nope"), lambda: ex.stub("nope")):
        with pytest.raises(ValueError, match="masked_softmax"):
            call()
    with pytest.raises(ValueError, match="callable"):
        ex.check("attention", 42)


def test_threads_are_restored(capsys):
    before = torch.get_num_threads()
    ex.check("swiglu", _swiglu("relu"))
    assert torch.get_num_threads() == before
