"""The numbers the diagrams print, computed by running tfmini on each chapter's own configuration.

Every function reads its sizes from the chapter's code (:mod:`diagrams.chapters`), builds the
tfmini modules the chapter builds, runs them on inputs of the chapter's sizes and records the shapes
of the tensors that flow between them (forward hooks, or the values the modules return). No shape is
typed in: change a chapter's configuration and its diagram follows.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

import tfmini

from .chapters import assigned, call_arguments, call_keywords, slice_stop


def _shape(x) -> tuple[int, ...]:
    return tuple(x.shape)


class Recorder:
    """Forward hooks that keep the output shape of named modules (the first tensor of a tuple)."""

    def __init__(self, modules: dict[str, torch.nn.Module]):
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.inputs: dict[str, tuple[int, ...]] = {}
        self._handles = [m.register_forward_hook(self._hook(name)) for name, m in modules.items()]

    def _hook(self, name: str) -> Callable:
        def hook(module, args, output):
            first = output[0] if isinstance(output, tuple) else output
            self.shapes.setdefault(name, _shape(first))
            if args and isinstance(args[0], torch.Tensor):
                self.inputs.setdefault(name, _shape(args[0]))
        return hook

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()


def _spelled_pairs(chapter: int, occurrence: int = 0) -> list:
    """The pairs of the running task that ``chapter`` draws with its ``occurrence``-th call."""
    args, kwargs = call_arguments(chapter, "spelled_numbers", occurrence)
    return tfmini.spelled_numbers(*args, **kwargs)


@functools.cache
def spelled_vocabs(chapter: int) -> tuple[tfmini.Vocab, tfmini.Vocab]:
    """Source and target vocabularies of the running task, built from the chapter's training pairs."""
    pairs = _spelled_pairs(chapter)
    return tfmini.Vocab.build(s for s, _ in pairs), tfmini.Vocab.build(t for _, t in pairs)


def _transformer_run(model: tfmini.Transformer, src: torch.Tensor, tgt_in: torch.Tensor) -> dict:
    """Shapes of one teacher-forced forward pass through an encoder-decoder."""
    layer = model.decoder.layers[0]
    with Recorder({"embedded": model.encoder.pos, "memory": model.encoder, "self_attn": layer.self_attn,
                   "cross_attn": layer.multihead_attn, "ffn_hidden": layer.ff.linear1,
                   "decoder_out": model.decoder.norm}) as rec, torch.no_grad():
        logits, weights = model(src, tgt_in, need_weights=True)
    return {"src": _shape(src), "tgt_in": _shape(tgt_in), **rec.shapes, "logits": _shape(logits),
            "self_weights": _shape(weights["decoder"][0]), "cross_weights": _shape(weights["cross"][0]),
            "encoder_weights": _shape(weights["encoder"][0])}


@functools.cache
def quick_tour() -> dict:
    """Chapter 0: the Transformer of the quick tour on its first test batch of the running task."""
    model, src, tgt = _chapter_model(0, 2)  # chapter 0's test batch
    return {"config": model.cfg, "tgt": _shape(tgt), **_transformer_run(model, src, tgt[:, :-1])}


# An example of the running task for the RNN diagrams: 24 and 7, spelled units first.
RNN_EXAMPLE = (24, 7)


@functools.cache
def rnn_seq2seq() -> dict:
    """Chapter 1: the fixed-context encoder-decoder on one example of the running task."""
    src_vocab, tgt_vocab = spelled_vocabs(1)
    words = [w for k, n in enumerate(RNN_EXAMPLE) for w in ([","] if k else []) + tfmini.number_words(n)]
    digits = [d for k, n in enumerate(RNN_EXAMPLE) for d in ([","] if k else []) + list(str(n))]
    torch.manual_seed(0)
    model = tfmini.Seq2SeqRNN(len(src_vocab), len(tgt_vocab), **call_keywords(1, "Seq2SeqRNN")).eval()
    src = torch.tensor([src_vocab.encode(words)])
    tgt_in = torch.tensor([tgt_vocab.encode(digits, bos=True)])
    with Recorder({"embedded": model.src_embed, "decoder_out": model.decoder}) as rec, torch.no_grad():
        outputs, (h, c) = model._encode(src)
        logits = model(src, tgt_in)
    return {"words": words, "digits": digits, "src": _shape(src), "tgt_in": _shape(tgt_in),
            "embedded": rec.shapes["embedded"], "encoder_out": _shape(outputs), "h": _shape(h), "c": _shape(c),
            "logits": _shape(logits), "context_numbers": h.shape[-1] + c.shape[-1]}


@functools.cache
def bahdanau_step() -> dict:
    """Chapter 2: one decoder step of the attention RNN, with the lectures' four scores."""
    scores = torch.tensor(call_arguments(2, "tensor", 0)[0][0], dtype=torch.float64)
    src_vocab, tgt_vocab = spelled_vocabs(2)
    torch.manual_seed(0)
    model = tfmini.AttentionSeq2SeqRNN(len(src_vocab), len(tgt_vocab), **assigned(2, "CONFIG")["attention"])
    src = torch.full((1, len(scores)), src_vocab.encode(["seven"])[0])  # S = one source position per score
    with Recorder({"features": model.features, "attention": model.attention}) as rec, torch.no_grad():
        state = model.start_decoding(src)
        h_prev = _shape(state["h"])
        context, weights = model.attention(state["h"], state["features"], state["mask"], state["keys"])
        step_in = torch.cat([model.tgt_embed(torch.tensor([tgt_vocab.bos_id])), context], dim=-1)
        logits = model.decode_next(torch.tensor([[tgt_vocab.bos_id]]), state)
    return {"scores": scores.tolist(), "weights": torch.softmax(scores, -1).tolist(), "src": _shape(src),
            "features": rec.shapes["features"], "h_prev": h_prev, "context": _shape(context),
            "alpha": _shape(weights), "lstm_in": _shape(step_in), "h_new": _shape(state["h"]),
            "out_in": (1, state["h"].shape[-1] + context.shape[-1]), "logits": _shape(logits)}


@functools.cache
def soft_lookup() -> dict:
    """Chapter 3: the legs table as keys and values, and a query halfway between 'cat' and 'ant'."""
    legs = assigned(3, "legs")
    beta = assigned(3, "beta_legs")
    words = list(legs)
    K = torch.eye(len(words))                                   # one-hot keys, as the chapter builds them
    V = torch.tensor([[float(legs[w])] for w in words])
    q = (K[words.index("cat")] + K[words.index("ant")]) / 2
    weights = tfmini.masked_softmax(beta * tfmini.DotScore()(q[None, None], K[None]))[0, 0]  # (S,)
    out = weights @ V
    return {"legs": legs, "beta": beta, "words": words, "query": q.tolist(), "weights": weights.tolist(),
            "out": out.item(), "K": _shape(K), "V": _shape(V), "q": _shape(q[None])}


@functools.cache
def self_attention() -> dict:
    """Chapter 4: scaled dot-product self-attention on the five-word sentence."""
    d, (d_k, d_v) = assigned(4, "d"), assigned(4, "d_k, d_v")
    words = assigned(4, "words")
    X = torch.randn(len(words), d)
    Q, K, V = X @ torch.randn(d, d_k), X @ torch.randn(d, d_k), X @ torch.randn(d, d_v)
    Z, A = tfmini.scaled_dot_product_attention(Q, K, V)
    return {"words": words, "d_k": d_k, "X": _shape(X), "W_Q": (d, d_k), "W_V": (d, d_v), "Q": _shape(Q),
            "K": _shape(K), "V": _shape(V), "scores": _shape(Q @ K.T), "weights": _shape(A), "Z": _shape(Z)}


@functools.cache
def multi_head() -> dict:
    """Chapter 5: tfmini.MultiHeadAttention on the chapter's batch, with the heads split and merged."""
    B, T, d, H = assigned(5, "B, T, d, H")
    mha = tfmini.MultiHeadAttention(d, H, bias=False)
    X = torch.randn(B, T, d)
    with Recorder({"out_proj": mha.out_proj}) as rec, torch.no_grad():
        projected = mha.q_proj(X)                                   # (B, T, d): all heads' queries
        q, k, v = mha.project_qkv(X)                                # (B, H, T, d/H) each
        heads, weights = tfmini.scaled_dot_product_attention(q, k, v)
        out, _ = mha.attend(q, k, v)
    return {"B": B, "T": T, "d": d, "H": H, "X": _shape(X), "projected": _shape(projected), "split": _shape(q),
            "weights": _shape(weights), "heads_out": _shape(heads), "merged": rec.inputs["out_proj"],
            "out": _shape(out)}


@functools.cache
def positional() -> dict:
    """Chapter 6: the sinusoidal table of width d_model, read as d/2 rotating (sin, cos) pairs."""
    d_model, _ = assigned(6, "d_model, num_heads")
    positions = 8
    pe = tfmini.sinusoidal_positional_encoding(positions, d_model)
    omega = [10000.0 ** (-2 * i / d_model) for i in range(d_model // 2)]
    return {"d_model": d_model, "pe": _shape(pe), "table": pe.tolist(), "omega": omega}


@functools.cache
def encoder_block() -> dict:
    """Chapter 7: tfmini.EncoderLayer with the chapter's sizes, in both arrangements."""
    d, heads, d_ff, B, T = assigned(7, "d_e, heads, d_ff_e, B, T_e")
    x = torch.randn(B, T, d)
    shapes = {"d": d, "heads": heads, "d_ff": d_ff}
    for norm_first in (False, True):
        layer = tfmini.EncoderLayer(d, heads, d_ff, norm_first=norm_first)
        with Recorder({"attn": layer.self_attn, "ffn_hidden": layer.ff.linear1, "ffn": layer.ff}) as rec, \
                torch.no_grad():
            out, weights = layer(x, need_weights=True)
        shapes["pre" if norm_first else "post"] = {"x": _shape(x), **rec.shapes, "out": _shape(out),
                                                   "weights": _shape(weights)}
    return shapes


@functools.cache
def masks() -> dict:
    """Chapter 8: the causal mask of the six-token target and the padding mask of the two sentences."""
    words = assigned(8, "words")
    sentences = assigned(8, "sentences")
    vocab = tfmini.Vocab.build(sentences)
    tgt = tfmini.pad_sequences([vocab.encode(s, bos=True) for s in sentences], vocab.pad_id)  # (B, T)
    key_pad = tfmini.mask_from_ids(tgt, vocab.pad_id)
    causal = tfmini.causal_mask(len(words))
    both = tfmini.attention_mask(key_pad, tfmini.causal_mask(tgt.shape[1]))
    return {"words": words, "causal": causal.tolist(), "causal_shape": _shape(causal),
            "tokens": [[vocab.itos[n] for n in row] for row in tgt.tolist()], "key_pad": key_pad.tolist(),
            "key_pad_shape": _shape(key_pad), "both": both[1, 0].tolist(), "both_shape": _shape(both)}


@functools.cache
def decoder_layer() -> dict:
    """Chapter 8: tfmini.DecoderLayer with the chapter's sizes, memory from a source of S positions."""
    T, d_ff = assigned(8, "T_layer, d_ff")
    D, _ = assigned(8, "D, d_kc")
    B, H = assigned(8, "B, H")
    S = len(assigned(8, "src_words"))  # the cross-attention example's source
    layer = tfmini.DecoderLayer(D, H, d_ff)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    with Recorder({"ffn_hidden": layer.ff.linear1}) as rec, torch.no_grad():
        out, weights = layer(x, memory, need_weights=True, is_causal=True)
    return {"D": D, "H": H, "d_ff": d_ff, "x": _shape(x), "memory": _shape(memory), "out": _shape(out),
            "self_weights": _shape(weights["self"]), "cross_weights": _shape(weights["cross"]),
            "ffn_hidden": rec.shapes["ffn_hidden"]}


@functools.cache
def _chapter_model(chapter: int, split: int) -> tuple[tfmini.Transformer, torch.Tensor, torch.Tensor]:
    """The chapter's encoder-decoder (untrained: only shapes are drawn) and the first batch of the
    split it draws with its ``split``-th calls to ``spelled_numbers`` and ``Batches``."""
    src_vocab, tgt_vocab = spelled_vocabs(chapter)
    pairs = _spelled_pairs(chapter, split)
    args, kwargs = call_arguments(chapter, "Batches", split)
    batches = tfmini.Batches(tfmini.encode_pairs(pairs, src_vocab, tgt_vocab), *args[1:], **kwargs)
    src, tgt = next(iter(batches))
    config = tfmini.TransformerConfig(len(tgt_vocab), src_vocab_size=len(src_vocab), **assigned(chapter, "CONFIG"))
    torch.manual_seed(0)
    return tfmini.Transformer(config).eval(), src, tgt


def _chapter9_model() -> tuple[tfmini.Transformer, torch.Tensor, torch.Tensor]:
    return _chapter_model(9, 2)  # chapter 9's test batch


@functools.cache
def full_transformer() -> dict:
    """Chapter 9: the encoder-decoder on the first rows of the test batch, as the chapter runs it."""
    model, src, tgt = _chapter9_model()
    rows = slice_stop(9, "src, tgt", 1)  # the chapter keeps src[:8], tgt[:8]
    return {"config": model.cfg, **_transformer_run(model, src[:rows], tgt[:rows, :-1])}


@functools.cache
def kv_cache() -> dict:
    """Chapter 10: decoding with a KV cache, five steps into the chapter's batch of long sources.

    Five, not four: the chapter's model has four heads, and a step count equal to the number of heads
    would make the cache's shape (B, H, t, d/H) ambiguous to read."""
    model, src, _ = _chapter_model(10, 1)  # chapter 10's validation batch
    rows, steps = slice_stop(10, "few_src"), 5
    with torch.no_grad():
        state = model.start_decoding(src[:rows])
        ys = torch.full((rows, 1), 1)
        for _ in range(steps):
            logits = model.decode_next(ys, state)
            ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
        cache = state["cache"][0]
        assert cache["k"].shape[2] == steps, "after step t the cache holds t keys"
        q = model.decoder.layers[0].self_attn.project_q(torch.randn(rows, 1, model.cfg.d_model))
    return {"layers": len(state["cache"]), "k": _shape(cache["k"]), "v": _shape(cache["v"]),
            "memory_k": _shape(cache["memory_k"]), "q": _shape(q), "scores": (*q.shape[:3], cache["k"].shape[2]),
            "logits": _shape(logits), "steps": steps}


@functools.cache
def cost() -> dict:
    """Chapter 11: the T x T weights of one head for the chapter's lengths, and their bytes in float32."""
    T_values = assigned(11, "T_values")
    weights = {}
    for T in T_values:
        q = torch.randn(1, 1, T, 8)
        _, w = tfmini.scaled_dot_product_attention(q, q, q)
        weights[T] = (_shape(w), w.numel() * w.element_size())
    return {"T_values": T_values, "weights": weights}


@functools.cache
def families() -> dict:
    """Chapter 12: the three families built from the chapter's one configuration."""
    V = assigned(12, "V")
    config = tfmini.TransformerConfig(V, **assigned(12, "SMALL"))
    return {"V": V, "config": config}


@functools.cache
def bpe() -> dict:
    """The byte-level BPE tokenizer trained on "aaabdaaabac": its bytes and each merge in turn."""
    from tfmini.tokenizer import BPETokenizer, merge_pair

    text = "aaabdaaabac"
    tok = BPETokenizer.train(text, 256 + 3)
    ids = list(text.encode("utf-8"))
    steps = [(None, ids)]
    for i, pair in enumerate(tok.merges):
        ids = merge_pair(ids, pair, 256 + i)
        steps.append((pair, ids))
    assert ids == tok.encode(text)
    return {"text": text, "steps": steps, "vocab": [tok.vocab[i].decode() for i in range(256, tok.vocab_size)]}


@functools.cache
def modern_block() -> dict:
    """Chapter 16: one block of the Llama-style decoder, on a batch of the chapter's training windows.

    The configuration is the chapter's ``LLAMA`` options with its ``CONTEXT`` and ``BATCH``; the
    vocabulary (the characters of the chapter's text) does not change any shape inside a block, so a
    stand-in size is used."""
    options = assigned(16, "LLAMA")
    T, B, *_ = assigned(16, "CONTEXT, BATCH, STEPS, LR, SEEDS")
    model = tfmini.DecoderOnlyLM(tfmini.TransformerConfig(100, max_len=T, **options)).eval()
    layer, cfg = model.decoder.layers[0], model.cfg
    with torch.no_grad():
        x = model.decoder.embed(torch.zeros(B, T, dtype=torch.long))
        q, k, v = layer.self_attn.project_qkv(layer.norm1(x))
        groups = cfg.num_heads // cfg.num_kv_heads
        shared = k.repeat_interleave(groups, dim=1)
        attended = x + layer.self_attn(layer.norm1(x), layer.norm1(x), layer.norm1(x), is_causal=True)[0]
        hidden = layer.ff.linear1(layer.norm3(attended))
        out = model.decoder.layers[0](x, is_causal=True)[0]
    return {"config": cfg, "x": _shape(x), "q": _shape(q), "k": _shape(k), "v": _shape(v), "shared": _shape(shared),
            "hidden": _shape(hidden), "out": _shape(out), "groups": groups}
