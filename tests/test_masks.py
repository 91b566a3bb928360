"""tfmini.masks, and what masks guarantee wherever they are used.

- ``causal_mask``, ``mask_from_lengths``, ``mask_from_ids`` and ``attention_mask`` build the right bool tensors
  (``padding_mask`` and ``pad_mask``, their former names, still work);
- no information from future tokens leaks through the causal mask (exact equality, not closeness),
  in MultiHeadAttention, DecoderLayer, DecoderOnlyLM and the Transformer's decoder;
- padded keys get exactly zero weight and their values cannot change the output;
- a query that may attend to nothing gets zero weights and zero output, never NaN, in fp32/fp16/bf16.
"""
from __future__ import annotations

import pytest
import torch

import tfmini
from tfmini import (DecoderLayer, DecoderOnlyLM, MultiHeadAttention, Transformer, TransformerConfig, attention_mask,
                    causal_mask, mask_from_ids, mask_from_lengths, pad_mask, padding_mask,
                    scaled_dot_product_attention)

DTYPES = [torch.float32, pytest.param(torch.float16, marks=pytest.mark.cpu_half_matmul), torch.bfloat16]


# --------------------------------------------------------------------------------------------- construction

@pytest.mark.parametrize("T", [1, 2, 5, 16])
def test_causal_mask_is_lower_triangular(T):
    m = causal_mask(T)
    assert m.dtype == torch.bool and m.shape == (T, T)
    assert torch.equal(m, torch.ones(T, T).tril().bool())


@pytest.mark.parametrize("T", [1, 3, 8])
def test_causal_mask_equals_the_triu_indices_construction(T):
    """The lecture's construction: mark the strictly upper triangle as forbidden, then invert."""
    idx = torch.triu_indices(T, T, offset=1)
    forbidden = torch.zeros(T, T, dtype=torch.bool)
    forbidden[idx[0], idx[1]] = True
    assert torch.equal(causal_mask(T), ~forbidden)


@pytest.mark.parametrize("T, S", [(1, 1), (1, 5), (3, 7), (4, 4)])
def test_causal_mask_with_more_keys_treats_queries_as_the_last_positions(T, S):
    m = causal_mask(T, S)
    assert m.shape == (T, S)
    for t in range(T):
        expected = torch.arange(S) <= S - T + t  # query t is position S - T + t
        assert torch.equal(m[t], expected)
    # The last T columns form the square causal mask, everything before is visible.
    assert torch.equal(m[:, S - T:], causal_mask(T))
    assert bool(m[:, :S - T].all())


@pytest.mark.parametrize("T, S", [(0, 0), (3, 2), (0, 4)])
def test_causal_mask_rejects_bad_sizes(T, S):
    with pytest.raises(ValueError, match=rf"causal_mask: expected 1 <= T <= S, got T={T}, S={S}"):
        causal_mask(T, S)


@pytest.mark.parametrize("lengths, max_len", [([3, 1, 4], None), ([2, 2], 5), ([0, 4], None), ([1], 1)])
def test_mask_from_lengths(lengths, max_len):
    m = mask_from_lengths(torch.tensor(lengths), max_len)
    S = max(lengths) if max_len is None else max_len
    assert m.dtype == torch.bool and m.shape == (len(lengths), S)
    for b, n in enumerate(lengths):
        assert m[b].tolist() == [True] * n + [False] * (S - n)


def test_mask_from_lengths_accepts_a_list():
    assert mask_from_lengths([1, 2]).tolist() == [[True, False], [True, True]]


@pytest.mark.parametrize("lengths, max_len, match", [
    (torch.tensor([1.0, 2.0]), None, r"lengths: expected a non-empty 1-D integer tensor, got shape \(2,\) and dtype torch\.float32"),
    (torch.tensor([[1, 2]]), None, r"lengths: expected a non-empty 1-D integer tensor, got shape \(1, 2\)"),
    (torch.tensor([1, 5]), 3, r"lengths: expected values in \[0, 3\], got \[1, 5\]"),
    (torch.tensor([-1, 2]), None, r"lengths: expected values in \[0, 2\], got \[-1, 2\]"),
])
def test_mask_from_lengths_rejects_bad_lengths(lengths, max_len, match):
    with pytest.raises(ValueError, match=match):
        mask_from_lengths(lengths, max_len)


def test_mask_from_ids():
    ids = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 0]])
    assert mask_from_ids(ids, 0).tolist() == [[True, True, False, False], [True, False, True, False]]
    assert mask_from_ids(ids, 7).tolist() == [[True, True, True, True], [False, True, True, True]]
    with pytest.raises(ValueError, match=r"ids: expected shape \(B, S\), got \(4,\)"):
        mask_from_ids(ids[0], 0)


@pytest.mark.parametrize("B, T, S", [(2, 3, 3), (3, 2, 5), (1, 1, 1)])
def test_attention_mask_combinations(B, T, S):
    pad = torch.rand(B, S) > 0.3
    causal = causal_mask(T, S)
    assert attention_mask() is None
    only_pad = attention_mask(key_padding=pad)
    assert only_pad.shape == (B, 1, 1, S) and torch.equal(only_pad[:, 0, 0], pad)
    only_causal = attention_mask(causal=causal)
    assert only_causal.shape == (T, S) and torch.equal(only_causal, causal)
    both = attention_mask(pad, causal)
    assert both.shape == (B, 1, T, S) and both.dtype == torch.bool
    for b in range(B):
        for t in range(T):
            assert torch.equal(both[b, 0, t], pad[b] & causal[t])


def test_attention_mask_rejects_bad_inputs():
    with pytest.raises(ValueError, match=r"key_padding: expected dtype torch\.bool.*got torch\.int64"):
        attention_mask(key_padding=torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"key_padding: expected shape \(B, S\), got \(2, 1, 3\)"):
        attention_mask(key_padding=torch.ones(2, 1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"causal: expected dtype torch\.bool.*got torch\.float32"):
        attention_mask(causal=torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"causal: expected shape \(T, S\), got \(1, 3, 3\)"):
        attention_mask(causal=torch.ones(1, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"causal: expected 4 keys to match key_padding, got shape \(3, 3\)"):
        attention_mask(torch.ones(2, 4, dtype=torch.bool), causal_mask(3))


# --------------------------------------------------------------------------------------------- no leak from the future

def perturbed_positions(T):
    return [1, T // 2, T - 1]


@pytest.mark.parametrize("how", ["mask", "is_causal"])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("j", perturbed_positions(6))
def test_mha_causal_mask_does_not_leak_future(j, need_weights, how):
    mha, T = MultiHeadAttention(16, 4).eval(), 6
    x = torch.randn(2, T, 16)
    y = x.clone()
    y[:, j] += 10 * torch.randn(2, 16)
    kw = dict(attn_mask=causal_mask(T)) if how == "mask" else dict(is_causal=True)
    out_x, w_x = mha(x, x, x, need_weights=need_weights, **kw)
    out_y, _ = mha(y, y, y, need_weights=need_weights, **kw)
    assert torch.equal(out_x[:, :j], out_y[:, :j])
    assert not torch.allclose(out_x[:, j:], out_y[:, j:])  # the perturbation is seen from j on
    if need_weights:
        assert (w_x[..., :j, j:] == 0.0).all()
        assert bool(w_x.triu(diagonal=1).eq(0).all())


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("with_padding", [False, True])
@pytest.mark.parametrize("T, S", [(5, 5), (1, 6), (3, 7)])
def test_mha_is_causal_equals_the_causal_mask(T, S, with_padding, need_weights):
    mha = MultiHeadAttention(16, 4).eval()
    query, memory = torch.randn(2, T, 16), torch.randn(2, S, 16)
    pad = attention_mask(mask_from_lengths(torch.tensor([S, S - 1]))) if with_padding else None
    out, w = mha(query, memory, memory, attn_mask=pad, need_weights=need_weights, is_causal=True)
    ref, ref_w = mha(query, memory, memory, attn_mask=attention_mask(None if pad is None else pad[:, 0, 0],
                                                                     causal_mask(T, S)), need_weights=True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    if need_weights:
        assert torch.equal(w, ref_w)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("cross_attention", [True, False])
@pytest.mark.parametrize("j", perturbed_positions(6))
def test_decoder_layer_does_not_leak_future(j, cross_attention, norm_first):
    layer = DecoderLayer(16, 4, d_ff=32, norm_first=norm_first, cross_attention=cross_attention).eval()
    T = 6
    x, memory = torch.randn(2, T, 16), torch.randn(2, 4, 16)
    y = x.clone()
    y[:, j] = torch.randn(2, 16)
    mem = memory if cross_attention else None
    out_x, _ = layer(x, mem, self_mask=causal_mask(T))
    out_y, _ = layer(y, mem, self_mask=causal_mask(T))
    assert torch.equal(out_x[:, :j], out_y[:, :j])
    assert not torch.allclose(out_x[:, j], out_y[:, j])


def tiny_config(**kw):
    base = dict(vocab_size=13, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32,
                dropout=0.0, max_len=32)
    base.update(kw)
    return TransformerConfig(**base)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("j", perturbed_positions(8))
def test_decoder_only_lm_does_not_leak_future(j, norm_first, positional):
    model = DecoderOnlyLM(tiny_config(norm_first=norm_first, positional=positional)).eval()
    ids = torch.randint(1, 13, (3, 8))
    changed = ids.clone()
    changed[:, j] = (ids[:, j] % 12) + 1  # a different non-pad token
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.equal(a[:, :j], b[:, :j])
    assert not torch.allclose(a[:, j], b[:, j])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("j", perturbed_positions(7))
def test_transformer_decoder_does_not_leak_future(j, norm_first):
    model = Transformer(tiny_config(norm_first=norm_first, src_vocab_size=9)).eval()
    src = torch.randint(1, 9, (3, 5))
    tgt = torch.randint(1, 13, (3, 7))
    changed = tgt.clone()
    changed[:, j] = (tgt[:, j] % 12) + 1
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    assert torch.equal(a[:, :j], b[:, :j])
    assert not torch.allclose(a[:, j], b[:, j])


def test_transformer_decoder_self_weights_are_causal():
    model = Transformer(tiny_config()).eval()
    _, w = model(torch.randint(1, 13, (2, 5)), torch.randint(1, 13, (2, 6)), need_weights=True)
    for layer_w in w["decoder"]:
        assert layer_w.shape == (2, 2, 6, 6)
        assert bool((layer_w.triu(diagonal=1) == 0.0).all())


# --------------------------------------------------------------------------------------------- padded keys

@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_padded_keys_get_exactly_zero_weight_and_are_ignored(dtype):
    B, T, S = 3, 4, 6
    pad = mask_from_lengths(torch.tensor([6, 2, 4]))  # (B, S)
    mask = attention_mask(pad)[:, 0]  # (B, 1, S)
    q, k, v = (torch.randn(B, T, 8, dtype=dtype), torch.randn(B, S, 8, dtype=dtype), torch.randn(B, S, 5, dtype=dtype))
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert (w.masked_select(~mask) == 0.0).all()
    k2, v2 = k.clone(), v.clone()
    k2[~pad] = 100.0
    v2[~pad] = -7.0
    out2, w2 = scaled_dot_product_attention(q, k2, v2, mask)
    assert torch.equal(out, out2) and torch.equal(w, w2)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("kind", ["self", "cross"])
def test_mha_padded_keys_get_exactly_zero_weight_and_are_ignored(kind, need_weights):
    mha = MultiHeadAttention(16, 4).eval()
    B, T, S = 3, 5, 6
    pad = mask_from_lengths(torch.tensor([6, 1, 3]))
    query = torch.randn(B, T, 16)
    memory = torch.randn(B, S, 16)
    if kind == "self":
        query, S = memory, T + 1
    mask = attention_mask(pad)
    out, w = mha(query, memory, memory, mask, need_weights=True)
    assert (w.masked_select(~mask) == 0.0).all()
    assert (w.masked_select(mask.expand_as(w)) > 0.0).all()
    changed = memory.clone()
    changed[~pad] = torch.randn(int((~pad).sum()), 16) * 50
    q2 = changed if kind == "self" else query
    out_a, _ = mha(query, memory, memory, mask, need_weights=need_weights)
    out_b, _ = mha(q2, changed, changed, mask, need_weights=need_weights)
    real_queries = pad if kind == "self" else torch.ones(B, T, dtype=torch.bool)
    assert torch.equal(out_a[real_queries], out_b[real_queries])


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_source_padding_changes_nothing(norm_first):
    """Extra pad tokens after the source (pad keys in the encoder and in cross-attention) leave the logits alone."""
    model = Transformer(tiny_config(norm_first=norm_first)).eval()
    src = torch.randint(1, 13, (2, 5))
    tgt = torch.randint(1, 13, (2, 4))
    padded = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        a, (b, w) = model(src, tgt), model(padded, tgt, need_weights=True)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for cross in w["cross"]:
        assert (cross[..., 5:] == 0.0).all()
    for enc in w["encoder"]:
        assert (enc[..., 5:] == 0.0).all()


# --------------------------------------------------------------------------------------------- empty rows

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", ["row", "batch"])
def test_sdpa_query_that_may_attend_to_nothing(dtype, mask_shape):
    q, k, v = torch.randn(2, 3, 4, 8, dtype=dtype), torch.randn(2, 3, 5, 8, dtype=dtype), torch.randn(2, 3, 5, 6, dtype=dtype)
    mask = torch.ones(2, 1, 4, 5, dtype=torch.bool)
    if mask_shape == "row":
        mask[:, :, 2] = False  # query 2 of every batch element
        empty = (slice(None), slice(None), 2)
    else:
        mask[1] = False  # every query of batch element 1
        empty = (1,)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == dtype and w.dtype == dtype
    assert not torch.isnan(out).any() and not torch.isnan(w).any()
    assert (w[empty] == 0).all() and (out[empty] == 0).all()
    full = mask.expand(2, 3, 4, 5).any(-1)
    assert_sum_to_one(w[full], dtype)


def assert_sum_to_one(w, dtype):
    tol = 1e-2 if dtype != torch.float32 else 1e-5
    torch.testing.assert_close(w.float().sum(-1), torch.ones(w.shape[:-1]), rtol=tol, atol=tol)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [False, True])
def test_mha_query_that_may_attend_to_nothing(dtype, need_weights, bias):
    mha = MultiHeadAttention(16, 4, bias=bias).to(dtype).eval()
    x, memory = torch.randn(2, 5, 16, dtype=dtype), torch.randn(2, 3, 16, dtype=dtype)
    mask = torch.ones(2, 1, 5, 3, dtype=torch.bool)
    mask[0, :, 1] = False  # query 1 of batch 0
    mask[1, :, 4] = False  # query 4 of batch 1
    with torch.no_grad():
        out, w = mha(x, memory, memory, mask, need_weights=need_weights)
    assert out.dtype == dtype and not torch.isnan(out).any()
    # Zero attention output; the output projection then adds only its bias.
    expected = mha.out_proj.bias if bias else torch.zeros(16, dtype=dtype)
    assert torch.equal(out[0, 1], expected) and torch.equal(out[1, 4], expected)
    assert not torch.equal(out[0, 0], expected)
    if need_weights:
        assert not torch.isnan(w).any()
        assert (w[0, :, 1] == 0).all() and (w[1, :, 4] == 0).all()
    else:
        assert w is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_fully_masked_rows_fused_equals_math(dtype):
    mha = MultiHeadAttention(8, 2).to(dtype).eval()
    x = torch.randn(3, 4, 8, dtype=dtype)
    mask = torch.rand(3, 1, 4, 4) > 0.5
    mask[0, :, 2] = False
    with torch.no_grad():
        a, _ = mha(x, x, x, mask, need_weights=True)
        b, _ = mha(x, x, x, mask, need_weights=False)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(a, b, **tol)


def test_fully_masked_rows_have_zero_gradient():
    q = torch.randn(1, 3, 4, requires_grad=True)
    k = torch.randn(1, 5, 4, requires_grad=True)
    v = torch.randn(1, 5, 4, requires_grad=True)
    mask = torch.ones(1, 3, 5, dtype=torch.bool)
    mask[0, 1] = False
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    out.sum().backward()
    assert not torch.isnan(q.grad).any() and (q.grad[0, 1] == 0).all()
    assert not torch.isnan(k.grad).any() and not torch.isnan(v.grad).any()


def test_bahdanau_attention_with_no_real_source_token():
    att = tfmini.BahdanauAttention(4, 6, 5)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    context, w = att(torch.randn(2, 4), torch.randn(2, 3, 6), mask)
    assert not torch.isnan(context).any()
    assert (w[1] == 0).all() and (context[1] == 0).all() and (w[0, 2] == 0).all()


def test_mask_from_lengths_rejects_empty_lengths():
    with pytest.raises(ValueError, match=r"lengths: expected a non-empty 1-D integer tensor, got shape \(0,\)"):
        mask_from_lengths(torch.tensor([], dtype=torch.long))


def test_former_mask_names_are_the_new_functions():
    lengths, ids = torch.tensor([3, 1]), torch.tensor([[4, 5, 7], [6, 0, 0]])
    assert torch.equal(padding_mask(lengths, 4), mask_from_lengths(lengths, 4))
    assert torch.equal(padding_mask(lengths, max_len=4), mask_from_lengths(lengths, S=4))
    assert torch.equal(pad_mask(ids, 0), mask_from_ids(ids, 0))
    assert torch.equal(mask_from_ids(ids, 0), mask_from_lengths(lengths, 3))
