"""tfmini.attention: scores, Bahdanau attention, scaled dot-product and multi-head attention.

Parity with ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention`` (weights copied, masks
inverted: tfmini's True = may attend, nn's True = ignore), gradchecks in float64 and input validation.
The behaviour of masks themselves (no leak, exact zeros, empty rows) is in test_masks.py.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

import tfmini
from tfmini import (AdditiveScore, BahdanauAttention, BilinearScore, DotScore, MultiHeadAttention, attention_mask,
                    causal_mask, masked_softmax, scaled_dot_product_attention)

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def re_shape(shape) -> str:
    """A regular expression matching ``str(tuple(shape))``."""
    return r"\(" + r", ".join(str(n) for n in shape) + (r",\)" if len(shape) == 1 else r"\)")


def random_mask(shape, generator=None):
    """A random bool mask in which every query row may attend to key 0 (so no row is empty)."""
    m = torch.rand(shape, generator=generator) > 0.4
    m[..., 0] = True
    return m


# --------------------------------------------------------------------------------------------- masked_softmax

@pytest.mark.parametrize("shape, dim", [((7,), -1), ((3, 5), -1), ((2, 3, 4, 6), -1), ((2, 3, 4), 1), ((4, 5), 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_softmax_without_mask_is_torch_softmax(shape, dim, dtype):
    s = torch.randn(shape, dtype=dtype) * 3
    assert_close(masked_softmax(s, dim=dim), torch.softmax(s, dim=dim), **TOL[dtype])


@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 6)])
def test_masked_softmax_equals_softmax_over_allowed_positions(shape):
    s = torch.randn(shape, dtype=torch.float64)
    mask = random_mask(shape)
    w = masked_softmax(s, mask)
    expected = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
    assert_close(w, expected, rtol=1e-12, atol=1e-12)
    assert (w[~mask] == 0.0).all()
    assert_close(w.sum(-1), torch.ones(shape[:-1], dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_masked_softmax_fully_masked_row_is_zero_not_nan():
    s = torch.randn(3, 4)
    mask = torch.tensor([[True, False, True, True], [False] * 4, [True] * 4])
    w = masked_softmax(s, mask)
    assert not torch.isnan(w).any()
    assert torch.equal(w[1], torch.zeros(4))
    assert_close(w[[0, 2]].sum(-1), torch.ones(2), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_masked_softmax_half_inputs_are_softmaxed_in_float32(dtype):
    s = (torch.randn(4, 9) * 4).to(dtype)
    w = masked_softmax(s)
    assert w.dtype == torch.float32
    assert_close(w, torch.softmax(s.float(), dim=-1), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("bad", [torch.ones(3, 4), torch.ones(3, 4, dtype=torch.long)])
def test_masked_softmax_rejects_non_bool_mask(bad):
    with pytest.raises(ValueError, match=rf"mask: expected dtype torch\.bool.*got {bad.dtype}"):
        masked_softmax(torch.randn(3, 4), bad)


@pytest.mark.parametrize("mask_shape", [(2, 3, 4), (3, 5)])
def test_masked_softmax_rejects_mask_that_does_not_broadcast(mask_shape):
    with pytest.raises(ValueError, match=rf"mask: .*{re_shape(mask_shape)}"):
        masked_softmax(torch.randn(3, 4), torch.ones(mask_shape, dtype=torch.bool))


def test_masked_softmax_gradcheck():
    s = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    mask = random_mask((2, 3, 5))
    mask[1, 2] = False  # one empty row
    assert torch.autograd.gradcheck(lambda x: masked_softmax(x, mask), (s,))
    assert torch.autograd.gradcheck(lambda x: masked_softmax(x), (s,))


# --------------------------------------------------------------------------------------------- score functions

@pytest.mark.parametrize("scaled", [False, True])
def test_dot_score(scaled):
    q, k = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    expected = torch.einsum("btd,bsd->bts", q, k) / (math.sqrt(8) if scaled else 1.0)
    assert_close(DotScore(scaled)(q, k), expected, rtol=1e-5, atol=1e-5)


def test_dot_score_rejects_width_mismatch():
    with pytest.raises(ValueError, match=r"keys: expected width 8.*\(2, 5, 6\)"):
        DotScore()(torch.randn(2, 3, 8), torch.randn(2, 5, 6))


def test_bilinear_score_is_q_W_k():
    score = BilinearScore(d_query=4, d_key=6)
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    W = score.W.weight  # (Dq, Dk)
    expected = torch.einsum("btq,qk,bsk->bts", q, W, k)
    assert_close(score(q, k), expected, rtol=1e-5, atol=1e-5)


def test_additive_score_is_v_tanh_Wq_q_plus_Wk_k():
    score = AdditiveScore(d_query=4, d_key=6, d_hidden=5)
    q, k = torch.randn(2, 3, 4), torch.randn(2, 7, 6)
    out = score(q, k)
    assert out.shape == (2, 3, 7)
    for b, t, s in [(0, 0, 0), (1, 2, 6), (0, 1, 3)]:
        hidden = torch.tanh(score.W_q.weight @ q[b, t] + score.W_k.weight @ k[b, s] + score.W_k.bias)
        assert_close(out[b, t, s], score.v.weight[0] @ hidden, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------- Bahdanau

@pytest.mark.parametrize("with_mask", [False, True])
def test_bahdanau_attention_weights_and_context(with_mask):
    att = BahdanauAttention(d_query=6, d_key=8, d_hidden=5)
    query, feats = torch.randn(3, 6), torch.randn(3, 7, 8)
    mask = tfmini.padding_mask(torch.tensor([7, 4, 1])) if with_mask else None
    context, weights = att(query, feats, mask)
    assert context.shape == (3, 8) and weights.shape == (3, 7)
    assert_close(weights.sum(-1), torch.ones(3), rtol=1e-6, atol=1e-6)
    assert_close(context, torch.einsum("bs,bsd->bd", weights, feats), rtol=1e-5, atol=1e-6)
    scores = att.score(query[:, None], feats)[:, 0]
    expected = torch.softmax(scores if mask is None else scores.masked_fill(~mask, float("-inf")), -1)
    assert_close(weights, expected, rtol=1e-5, atol=1e-6)
    if with_mask:
        assert (weights[~mask] == 0.0).all()


def test_bahdanau_attention_rejects_bad_inputs():
    att = BahdanauAttention(d_query=6, d_key=8, d_hidden=5)
    with pytest.raises(ValueError, match=r"query: expected shape \(B, 6\), got \(3, 5\)"):
        att(torch.randn(3, 5), torch.randn(3, 7, 8))
    with pytest.raises(ValueError, match=r"features: .*d_model=8.*\(3, 7, 9\)"):
        att(torch.randn(3, 6), torch.randn(3, 7, 9))
    with pytest.raises(ValueError, match=r"mask: expected dtype torch\.bool.*torch\.int64"):
        att(torch.randn(3, 6), torch.randn(3, 7, 8), torch.ones(3, 7, dtype=torch.long))
    with pytest.raises(ValueError, match=r"mask: expected a shape broadcastable to \(3, 7\), got \(3, 6\)"):
        att(torch.randn(3, 6), torch.randn(3, 7, 8), torch.ones(3, 6, dtype=torch.bool))


# --------------------------------------------------------------------------------------------- scaled dot-product

MASK_KINDS = ["none", "TS", "B1TS", "BHTS", "B11S"]


def make_mask(kind, B, H, T, S):
    shapes = {"TS": (T, S), "B1TS": (B, 1, T, S), "BHTS": (B, H, T, S), "B11S": (B, 1, 1, S)}
    return None if kind == "none" else random_mask(shapes[kind])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("B, H, T, S, Dk, Dv", [(2, 3, 4, 4, 8, 8), (2, 2, 3, 6, 8, 5), (1, 1, 5, 2, 4, 7)])
def test_sdpa_matches_pytorch(kind, B, H, T, S, Dk, Dv, dtype):
    q, k, v = (torch.randn(B, H, T, Dk, dtype=dtype), torch.randn(B, H, S, Dk, dtype=dtype),
               torch.randn(B, H, S, Dv, dtype=dtype))
    mask = make_mask(kind, B, H, T, S)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (B, H, T, Dv) and w.shape == (B, H, T, S)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL[dtype])
    # The weights are the softmax of the scaled scores over the allowed keys.
    scores = q @ k.transpose(-2, -1) / math.sqrt(Dk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    assert_close(w, torch.softmax(scores, -1), **TOL[dtype])


@pytest.mark.parametrize("with_mask", [False, True])
def test_sdpa_unbatched_inputs(with_mask):
    T, S, Dk, Dv = 5, 6, 8, 3
    q, k, v = torch.randn(T, Dk), torch.randn(S, Dk), torch.randn(S, Dv)
    mask = random_mask((T, S)) if with_mask else None
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (T, Dv) and w.shape == (T, S)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=1e-5, atol=1e-5)
    batched, _ = scaled_dot_product_attention(q[None], k[None], v[None], mask)
    assert_close(out, batched[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [pytest.param(torch.float16, marks=pytest.mark.cpu_half_matmul), torch.bfloat16])
def test_sdpa_half_precision_close_to_float32(dtype):
    q, k, v = torch.randn(2, 2, 4, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    mask = random_mask((2, 1, 4, 6))
    ref, ref_w = scaled_dot_product_attention(q, k, v, mask)
    out, w = scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask)
    assert out.dtype == dtype and w.dtype == dtype
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=5e-3, atol=5e-3)
    assert_close(out.float(), ref, **tol)
    assert_close(w.float(), ref_w, **tol)


def test_sdpa_dropout_changes_output_but_not_weights():
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    ref, ref_w = scaled_dot_product_attention(q, k, v)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert torch.equal(w, ref_w)
    assert not torch.allclose(out, ref)


@pytest.mark.parametrize("with_mask", [False, True])
def test_sdpa_gradcheck(with_mask):
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    mask = random_mask((2, 3, 5)) if with_mask else None
    if with_mask:
        mask[0, 1] = False  # an empty row: zero output, zero gradient
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v))


def test_sdpa_rejects_width_mismatch():
    with pytest.raises(ValueError, match=r"k: expected width Dk=8 to match q, got shape \(2, 5, 6\)"):
        scaled_dot_product_attention(torch.randn(2, 4, 8), torch.randn(2, 5, 6), torch.randn(2, 5, 6))


def test_sdpa_rejects_value_length_mismatch():
    with pytest.raises(ValueError, match=r"v: expected S=5 .*got shape \(2, 4, 8\)"):
        scaled_dot_product_attention(torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 4, 8))


def test_sdpa_rejects_batch_mismatch():
    with pytest.raises(ValueError, match=r"k, v: expected leading \(batch\) dimensions \(2,\).*\(3, 5, 8\)"):
        scaled_dot_product_attention(torch.randn(2, 4, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 8))


@pytest.mark.parametrize("bad", [torch.ones(4, 5), torch.ones(4, 5, dtype=torch.int32), torch.ones(4, 5, dtype=torch.uint8)])
def test_sdpa_rejects_non_bool_mask(bad):
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=rf"attn_mask: expected dtype torch\.bool.*got {bad.dtype}"):
        scaled_dot_product_attention(q, k, v, bad)


@pytest.mark.parametrize("shape", [(4, 6), (3, 4, 5), (2, 1, 4, 5), (5, 4)])
def test_sdpa_rejects_mask_that_does_not_broadcast(shape):
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=rf"attn_mask: expected a shape broadcastable to \(2, 4, 5\), got {re_shape(shape)}"):
        scaled_dot_product_attention(q, k, v, torch.ones(shape, dtype=torch.bool))


@pytest.mark.parametrize("q_shape, k_shape, name", [
    ((0, 4, 8), (0, 5, 8), "q"), ((2, 0, 8), (2, 5, 8), "q"), ((2, 4, 8), (2, 0, 8), "k"), ((2, 0, 4, 8), (2, 0, 5, 8), "q"),
])
def test_sdpa_rejects_empty_inputs(q_shape, k_shape, name):
    q, k = torch.randn(q_shape), torch.randn(k_shape)
    bad = k_shape if name == "k" else q_shape
    with pytest.raises(ValueError, match=rf"{name}: expected a non-empty batch and sequence, got shape {re_shape(bad)}"):
        scaled_dot_product_attention(q, k, k)


def test_sdpa_rejects_integer_and_mixed_dtypes():
    with pytest.raises(ValueError, match=r"q: expected a floating tensor.*torch\.int64"):
        scaled_dot_product_attention(torch.ones(2, 3, dtype=torch.long), torch.randn(2, 3), torch.randn(2, 3))
    with pytest.raises(ValueError, match=r"q, k, v: expected one dtype, got torch\.float32, torch\.float64"):
        scaled_dot_product_attention(torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3))


# --------------------------------------------------------------------------------------------- multi-head attention

def make_pair(D, H, copy_mha, dtype=torch.float32, bias=True):
    ref = nn.MultiheadAttention(D, H, batch_first=True, bias=bias, dtype=dtype)
    mha = MultiHeadAttention(D, H, bias=bias).to(dtype)
    if bias:
        copy_mha(mha, ref)
    else:
        with torch.no_grad():
            for proj, w in zip((mha.q_proj, mha.k_proj, mha.v_proj), ref.in_proj_weight.chunk(3)):
                proj.weight.copy_(w)
            mha.out_proj.weight.copy_(ref.out_proj.weight)
    return mha, ref


def test_mha_has_the_contract_submodules():
    mha = MultiHeadAttention(12, 3)
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        lin = getattr(mha, name)
        assert isinstance(lin, nn.Linear) and (lin.in_features, lin.out_features) == (12, 12)
        assert lin.bias is not None
    assert sum(p.numel() for p in mha.parameters()) == 4 * (12 * 12 + 12)
    assert all(getattr(MultiHeadAttention(12, 3, bias=False), n).bias is None
               for n in ("q_proj", "k_proj", "v_proj", "out_proj"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("masks", ["none", "causal", "padding", "causal+padding"])
@pytest.mark.parametrize("kind, T, S", [("self", 5, 5), ("cross", 4, 7)])
@pytest.mark.parametrize("D, H", [(16, 4), (12, 1)])
def test_mha_matches_nn_multihead_attention(kind, T, S, masks, D, H, dtype, copy_mha):
    B = 3
    mha, ref = make_pair(D, H, copy_mha, dtype)
    query = torch.randn(B, T, D, dtype=dtype)
    key = query if kind == "self" else torch.randn(B, S, D, dtype=dtype)
    value = query if kind == "self" else torch.randn(B, S, D, dtype=dtype)
    causal = causal_mask(T, S) if "causal" in masks else None
    pad = tfmini.padding_mask(torch.tensor([S, 1, S - 2]), S) if "padding" in masks else None
    mask = attention_mask(pad, causal)

    ref_out, ref_w = ref(query, key, value, need_weights=True, average_attn_weights=False,
                         key_padding_mask=None if pad is None else ~pad,  # nn: True = ignore
                         attn_mask=None if causal is None else ~causal)
    out, w = mha(query, key, value, attn_mask=mask, need_weights=True)
    assert out.shape == (B, T, D) and w.shape == (B, H, T, S)
    assert_close(out, ref_out, **TOL[dtype])
    assert_close(w, ref_w, **TOL[dtype])

    fused, none = mha(query, key, value, attn_mask=mask, need_weights=False)
    assert none is None
    assert_close(fused, out, **TOL[dtype])
    ref_fused, _ = ref(query, key, value, need_weights=False, key_padding_mask=None if pad is None else ~pad,
                       attn_mask=None if causal is None else ~causal)
    assert_close(fused, ref_fused, **TOL[dtype])


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_matches_nn_in_eval_mode_without_grad(need_weights, copy_mha):
    """nn.MultiheadAttention may take its fast path here; the outputs must still agree."""
    mha, ref = make_pair(16, 2, copy_mha)
    mha.eval(), ref.eval()
    x = torch.randn(2, 6, 16)
    pad = tfmini.padding_mask(torch.tensor([6, 3]))
    with torch.no_grad():
        ref_out, _ = ref(x, x, x, key_padding_mask=~pad, need_weights=False)
        out, _ = mha(x, x, x, attn_mask=attention_mask(pad), need_weights=need_weights)
    assert_close(out, ref_out, rtol=1e-5, atol=1e-5)


def test_mha_without_bias_matches_nn(copy_mha):
    mha, ref = make_pair(8, 2, copy_mha, bias=False)
    x, m = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    ref_out, ref_w = ref(x, m, m, need_weights=True, average_attn_weights=False)
    out, w = mha(x, m, m, need_weights=True)
    assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    assert_close(w, ref_w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mha_input_gradients_match_nn(dtype, copy_mha):
    mha, ref = make_pair(16, 4, copy_mha, dtype)
    x = torch.randn(2, 5, 16, dtype=dtype, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    causal = causal_mask(5)
    out, _ = mha(x, x, x, attn_mask=causal)
    ref_out, _ = ref(x_ref, x_ref, x_ref, attn_mask=~causal, need_weights=False)
    g = torch.randn_like(out)
    out.backward(g)
    ref_out.backward(g)
    assert_close(x.grad, x_ref.grad, **TOL[dtype])
    assert_close(mha.out_proj.weight.grad, ref.out_proj.weight.grad, **TOL[dtype])
    q_grad = torch.cat([mha.q_proj.weight.grad, mha.k_proj.weight.grad, mha.v_proj.weight.grad])
    assert_close(q_grad, ref.in_proj_weight.grad, **TOL[dtype])


@pytest.mark.parametrize("mask_shape", [None, (4, 4), (2, 1, 1, 4), (2, 3, 4, 4)])
def test_mha_fused_path_equals_math_path(mask_shape):
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 4, 12)
    mask = None if mask_shape is None else random_mask(mask_shape)
    out_math, w = mha(x, x, x, mask, need_weights=True)
    out_fused, _ = mha(x, x, x, mask, need_weights=False)
    assert_close(out_fused, out_math, rtol=1e-5, atol=1e-6)
    assert_close(w.sum(-1), torch.ones(2, 3, 4), rtol=1e-6, atol=1e-6)


def test_mha_heads_are_independent_attentions():
    """Head h's output equals attention with head h's slices of the projections."""
    D, H = 12, 3
    mha = MultiHeadAttention(D, H)
    q, kv = torch.randn(2, 4, D), torch.randn(2, 6, D)
    _, w = mha(q, kv, kv, need_weights=True)
    Dh = D // H
    for h in range(H):
        sl = slice(h * Dh, (h + 1) * Dh)
        qh = q @ mha.q_proj.weight[sl].T + mha.q_proj.bias[sl]
        kh = kv @ mha.k_proj.weight[sl].T + mha.k_proj.bias[sl]
        expected = torch.softmax(qh @ kh.transpose(-2, -1) / math.sqrt(Dh), -1)
        assert_close(w[:, h], expected, rtol=1e-5, atol=1e-6)


def test_mha_dropout_only_in_training():
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 5, 8)
    mha.eval()
    a, _ = mha(x, x, x)
    b, _ = mha(x, x, x, need_weights=True)
    assert_close(a, b, rtol=1e-5, atol=1e-6)
    mha.train()
    c, _ = mha(x, x, x)
    assert not torch.allclose(a, c)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
def test_mha_gradcheck(need_weights, with_mask):
    mha = MultiHeadAttention(6, 2).double()
    q = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    mask = random_mask((2, 1, 3, 4)) if with_mask else None

    def cross(q, kv):
        return mha(q, kv, kv, attn_mask=mask, need_weights=need_weights)[0]

    def self_attention(x):
        return mha(x, x, x, attn_mask=None if mask is None else mask[..., :3], need_weights=need_weights)[0]

    assert torch.autograd.gradcheck(cross, (q, kv))
    assert torch.autograd.gradcheck(self_attention, (q,))


# --------------------------------------------------------------------------------------------- MHA validation

@pytest.mark.parametrize("d_model, num_heads", [(10, 3), (16, 5)])
def test_mha_rejects_d_model_not_divisible_by_heads(d_model, num_heads):
    with pytest.raises(ValueError, match=rf"d_model: expected a multiple of num_heads={num_heads}, got d_model={d_model}"):
        MultiHeadAttention(d_model, num_heads)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_heads=0), r"num_heads: expected >= 1, got 0"),
    (dict(num_heads=4, num_kv_heads=3), r"num_kv_heads: expected a divisor of num_heads=4, got 3"),
    (dict(num_heads=4, num_kv_heads=0), r"num_kv_heads: expected a divisor of num_heads=4, got 0"),
    (dict(num_heads=4, head_dim=0), r"head_dim: expected >= 1, got 0"),
])
def test_mha_rejects_bad_heads(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(8, **kwargs)


@pytest.mark.parametrize("arg, shapes", [
    ("query", [(2, 5, 12), (2, 5, 16), (2, 5, 16)]),
    ("key", [(2, 5, 16), (2, 6, 12), (2, 6, 16)]),
    ("value", [(2, 5, 16), (2, 6, 16), (2, 6, 20)]),
])
def test_mha_rejects_input_width_other_than_d_model(arg, shapes):
    mha = MultiHeadAttention(16, 4)
    bad = dict(zip(("query", "key", "value"), shapes))[arg]
    with pytest.raises(ValueError, match=rf"{arg}: expected last dimension d_model=16, got shape {re_shape(bad)}"):
        mha(*(torch.randn(s) for s in shapes))


@pytest.mark.parametrize("shape", [(2, 5), (2, 5, 16, 1)])
def test_mha_rejects_non_3d_input(shape):
    with pytest.raises(ValueError, match=rf"query: expected shape \(B, T, D\), got {re_shape(shape)}"):
        MultiHeadAttention(16, 4)(torch.randn(shape), torch.randn(2, 5, 16), torch.randn(2, 5, 16))


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_mha_rejects_non_bool_mask(dtype, need_weights):
    mha, x = MultiHeadAttention(16, 4), torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=rf"attn_mask: expected dtype torch\.bool.*got {dtype}"):
        mha(x, x, x, attn_mask=torch.ones(5, 5, dtype=dtype), need_weights=need_weights)


@pytest.mark.parametrize("shape", [(5, 6), (3, 5, 5), (2, 2, 5, 5), (2, 4, 5, 5, 1), (6, 5)])
def test_mha_rejects_mask_that_does_not_broadcast(shape):
    mha, x = MultiHeadAttention(16, 4), torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=rf"attn_mask: expected a shape broadcastable to \(2, 4, 5, 5\), got {re_shape(shape)}"):
        mha(x, x, x, attn_mask=torch.ones(shape, dtype=torch.bool))


@pytest.mark.parametrize("q_shape, kv_shape, name, bad", [
    ((0, 5, 16), (0, 5, 16), "query", (0, 5, 16)),
    ((2, 0, 16), (2, 5, 16), "query", (2, 0, 16)),
    ((2, 5, 16), (2, 0, 16), "key", (2, 0, 16)),
])
def test_mha_rejects_empty_batch_or_sequence(q_shape, kv_shape, name, bad):
    mha = MultiHeadAttention(16, 4)
    kv = torch.randn(kv_shape)
    with pytest.raises(ValueError, match=rf"{name}: expected a non-empty batch and sequence.*got shape {re_shape(bad)}"):
        mha(torch.randn(q_shape), kv, kv)


def test_mha_rejects_key_value_and_batch_mismatch():
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"value: expected \(B, S\) = \(2, 6\) as in key, got shape \(2, 7, 16\)"):
        mha(torch.randn(2, 5, 16), torch.randn(2, 6, 16), torch.randn(2, 7, 16))
    with pytest.raises(ValueError, match=r"key: expected batch size 2 as in query, got 3"):
        mha(torch.randn(2, 5, 16), torch.randn(3, 6, 16), torch.randn(3, 6, 16))


def test_score_modules_reject_wrong_widths():
    from tfmini import AdditiveScore, BilinearScore
    with pytest.raises(ValueError, match=r"keys: expected last dimension 5, got shape \(2, 4, 6\)"):
        BilinearScore(3, 5)(torch.randn(2, 1, 3), torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"query: expected last dimension 3, got shape \(2, 1, 4\)"):
        BilinearScore(3, 5)(torch.randn(2, 1, 4), torch.randn(2, 4, 5))
    with pytest.raises(ValueError, match=r"keys: expected last dimension d_model=5, got shape \(2, 4, 6\)"):
        AdditiveScore(3, 5, 8)(torch.randn(2, 1, 3), torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"query: expected last dimension d_model=3, got shape \(2, 1, 4\)"):
        AdditiveScore(3, 5, 8)(torch.randn(2, 1, 4), torch.randn(2, 4, 5))


# ------------------------------------------------------------ no copies: shared q/k/v storage, grouped K/V read in place

def _shares_one_storage(mha):
    weights = [mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]
    biases = [mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias] if mha.q_proj.bias is not None else []
    return all(len({t.untyped_storage().data_ptr() for t in group}) == 1 for group in (weights, biases) if group)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("H, G", [(4, 4), (4, 2), (4, 1)])
def test_qkv_projections_share_one_storage_and_keep_no_copy(H, G, bias):
    """The three input projections are three parameters (their state-dict keys unchanged) whose weights
    lie one after another in one storage: inference reads them as one matrix, a view, and the module
    keeps no stacked copy. Conversions, copies and pickling keep the sharing; replaced parameters
    still give the same output (stacked for the call)."""
    import copy
    import io
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, H, bias=bias, num_kv_heads=G)
    assert {k.split(".")[0] for k in mha.state_dict()} == {"q_proj", "k_proj", "v_proj", "out_proj"}
    assert _shares_one_storage(mha)
    x = torch.randn(2, 5, 16)
    trained = mha(x, x, x)[0]  # gradients flow: the weights are stacked for the call
    with torch.no_grad():
        out = mha(x, x, x)[0]
        stacked, _ = mha._stacked_qkv()
        assert stacked.data_ptr() == mha.q_proj.weight.data_ptr() and stacked.shape == ((H + 2 * G) * 4, 16)
    assert torch.equal(out, trained)
    held = [v for v in vars(mha).values() if isinstance(v, torch.Tensor)]
    assert held == []  # no tensor beside the parameters (the stacked view is rebuilt on use, not saved)
    for other in (copy.deepcopy(mha), mha.double(), pickle_round_trip(mha)):
        assert _shares_one_storage(other)
        with torch.no_grad():
            assert_close(other(x.to(other.q_proj.weight.dtype), x.to(other.q_proj.weight.dtype),
                               x.to(other.q_proj.weight.dtype))[0].float(), out, rtol=1e-6, atol=1e-6)
    mha = mha.float()
    mha.load_state_dict({k: v.clone() for k, v in mha.state_dict().items()}, assign=True)
    assert not _shares_one_storage(mha)
    with torch.no_grad():
        assert torch.equal(mha(x, x, x)[0], out)


def pickle_round_trip(module):
    import io
    buf = io.BytesIO()
    torch.save(module, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("gqa_kernel", [True, False])
@pytest.mark.parametrize("case", ["none", "causal", "causal-after-cache", "padding-with-empty-row", "decode-step"])
def test_grouped_query_attention_reads_key_value_heads_in_place(case, gqa_kernel, monkeypatch):
    """Without gradients, G key/value heads serve H query heads with no repeated copy of them: the
    kernel's enable_gqa (torch >= 2.5) or, before it, the group's query heads as extra query rows.
    Both equal attention over the repeated heads; a query row with no key gets zeros."""
    import tfmini.attention as attention
    if gqa_kernel and not attention._SDPA_GQA:
        pytest.skip("torch < 2.5 has no enable_gqa")
    monkeypatch.setattr(attention, "_SDPA_GQA", gqa_kernel)
    torch.manual_seed(0)
    B, H, G, Dh = 2, 6, 2, 8
    mha = MultiHeadAttention(H * Dh, H, num_kv_heads=G).eval()
    T, S = {"decode-step": (1, 7), "causal-after-cache": (3, 7)}.get(case, (5, 5))
    q, k, v = torch.randn(B, H, T, Dh), torch.randn(B, G, S, Dh), torch.randn(B, G, S, Dh)
    mask, is_causal = None, case.startswith("causal")
    if case == "padding-with-empty-row":
        mask = torch.rand(B, 1, T, S) > 0.4
        mask[0, 0, 2] = False  # a query row with no key
    with torch.no_grad():
        expected, _ = mha.attend(q, k, v, mask, need_weights=True, is_causal=is_causal)  # explicit: heads repeated

        def refuse(*args, **kwargs):
            raise AssertionError("the key/value heads were repeated")

        monkeypatch.setattr(torch.Tensor, "repeat_interleave", refuse)
        kernel, calls = F.scaled_dot_product_attention, []

        def spy(q_, k_, v_, *args, **kwargs):  # what the fused kernel is given
            calls.append((q_.shape, k_.shape, kwargs.get("enable_gqa", False)))
            return kernel(q_, k_, v_, *args, **kwargs)

        monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
        got, _ = mha.attend(q, k, v, mask, is_causal=is_causal)
    monkeypatch.undo()
    assert len(calls) == 1 and calls[0][1][1] == G  # one call, on the G key/value heads as they are
    assert calls[0][2] == gqa_kernel  # enable_gqa where torch has it; the fallback folds heads into rows
    if not gqa_kernel:
        assert calls[0][0] == (B, G, H // G * T, Dh)
    assert_close(got, expected, rtol=1e-5, atol=1e-6)
    if case == "padding-with-empty-row":  # every head gives zeros: the output is out_proj's bias
        assert_close(got[0, 2], mha.out_proj.bias.detach(), rtol=0, atol=1e-6)
