"""tfmini.layers: FeedForward, EncoderLayer, DecoderLayer.

The layers are compared with ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` (weights
copied; post-LN and pre-LN; relu and gelu; eval and train mode with dropout 0; tfmini masks
True = attend against nn's bool masks True = ignore, or its float masks), including input gradients.
This also checks that the layers' norms behave like ``nn.LayerNorm``.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from tfmini import DecoderLayer, EncoderLayer, FeedForward, attention_mask, causal_mask, padding_mask

D, H, FF = 16, 4, 24
TOL = dict(rtol=1e-5, atol=1e-5)
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)


def float_mask(allowed: torch.Tensor) -> torch.Tensor:
    """nn's additive float mask: 0 where allowed, -inf where not."""
    return torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))


# --------------------------------------------------------------------------------------------- feed-forward

@pytest.mark.parametrize("activation, fn", [("relu", F.relu), ("gelu", F.gelu)])
@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 8), (2, 2, 3, 8)])
def test_feed_forward(activation, fn, shape):
    ff = FeedForward(8, 12, activation=activation)
    x = torch.randn(shape)
    expected = fn(x @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T + ff.linear2.bias
    assert_close(ff(x), expected, **TOL)


def test_feed_forward_is_position_wise():
    ff = FeedForward(8, 12)
    x = torch.randn(2, 6, 8)
    assert_close(ff(x)[:, 3], ff(x[:, 3]), **TOL)


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ValueError, match=r"activation: expected one of \['gelu', 'gelu_tanh', 'relu'\], got 'tanh'"):
        FeedForward(8, 12, activation="tanh")


# --------------------------------------------------------------------------------------------- encoder layer

ENC_MASKS = ["none", "padding", "causal", "causal-float", "padding+causal"]


def encoder_masks(kind, B, T):
    """(tfmini mask, nn kwargs) for one mask kind."""
    pad = padding_mask(torch.tensor([T, 2, T - 1][:B]), T)
    causal = causal_mask(T)
    ours = attention_mask(pad if "padding" in kind else None, causal if "causal" in kind else None)
    theirs = {}
    if "padding" in kind:
        theirs["src_key_padding_mask"] = ~pad  # nn: True = ignore
    if kind == "causal-float":
        theirs["src_mask"] = float_mask(causal)
    elif "causal" in kind:
        theirs["src_mask"] = ~causal
    return ours, theirs


def make_encoder_pair(norm_first, activation, copy_layer):
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=norm_first)
    ours = EncoderLayer(D, H, FF, dropout=0.0, norm_first=norm_first, activation=activation)
    with torch.no_grad():  # non-trivial LayerNorm parameters, so that a mix-up of norms shows
        for p in list(ref.norm1.parameters()) + list(ref.norm2.parameters()):
            p.add_(0.3 * torch.randn_like(p))
    copy_layer(ours, ref)
    return ours, ref


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("mask_kind", ENC_MASKS)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_nn(norm_first, activation, mask_kind, train, copy_layer):
    ours, ref = make_encoder_pair(norm_first, activation, copy_layer)
    ours.train(train), ref.train(train)
    B, T = 3, 6
    x = torch.randn(B, T, D, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    mask, ref_kwargs = encoder_masks(mask_kind, B, T)
    out, weights = ours(x, mask)
    ref_out = ref(x_ref, **ref_kwargs)
    assert weights is None
    assert_close(out, ref_out, **TOL)
    g = torch.randn_like(out)
    out.backward(g)
    ref_out.backward(g)
    assert_close(x.grad, x_ref.grad, **GRAD_TOL)
    assert_close(ours.ff.linear1.weight.grad, ref.linear1.weight.grad, **GRAD_TOL)
    assert_close(ours.norm1.weight.grad, ref.norm1.weight.grad, **GRAD_TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_nn_without_grad_in_eval(norm_first, copy_layer):
    """With grad off nn may take its fused fast path; the outputs must agree at every real position."""
    ours, ref = make_encoder_pair(norm_first, "relu", copy_layer)
    ours.eval(), ref.eval()
    x = torch.randn(2, 5, D)
    pad = padding_mask(torch.tensor([5, 3]))
    with torch.no_grad():
        out, _ = ours(x, attention_mask(pad))
        ref_out = ref(x, src_key_padding_mask=~pad)
    assert_close(out[pad], ref_out[pad], **TOL)


def test_encoder_layer_weights_and_shape():
    layer = EncoderLayer(D, H, FF).eval()
    x = torch.randn(2, 5, D)
    pad = padding_mask(torch.tensor([5, 2]))
    out, w = layer(x, attention_mask(pad), need_weights=True)
    assert out.shape == x.shape and w.shape == (2, H, 5, 5)
    assert (w[1, :, :, 2:] == 0).all()
    out2, _ = layer(x, attention_mask(pad))
    assert_close(out, out2, **TOL)


def test_encoder_layer_default_d_ff_and_dropout():
    layer = EncoderLayer(8, 2, dropout=0.5)
    assert layer.ff.linear1.out_features == 32
    x = torch.randn(2, 5, 8)
    layer.train()
    a, _ = layer(x)
    b, _ = layer(x)
    assert not torch.allclose(a, b)
    layer.eval()
    c, _ = layer(x)
    d, _ = layer(x)
    assert torch.equal(c, d)


# --------------------------------------------------------------------------------------------- decoder layer

def make_decoder_pair(norm_first, activation, copy_layer):
    ref = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=norm_first)
    ours = DecoderLayer(D, H, FF, dropout=0.0, norm_first=norm_first, activation=activation)
    with torch.no_grad():
        for norm in (ref.norm1, ref.norm2, ref.norm3):
            for p in norm.parameters():
                p.add_(0.3 * torch.randn_like(p))
    copy_layer(ours, ref)
    return ours, ref


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "causal-float", "causal+memory-padding"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_nn(norm_first, activation, mask_kind, train, copy_layer):
    ours, ref = make_decoder_pair(norm_first, activation, copy_layer)
    ours.train(train), ref.train(train)
    B, T, S = 3, 5, 7
    x = torch.randn(B, T, D, requires_grad=True)
    memory = torch.randn(B, S, D, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    memory_ref = memory.detach().clone().requires_grad_(True)
    causal = causal_mask(T)
    mem_pad = padding_mask(torch.tensor([S, 3, 1]), S)
    self_mask = causal if "causal" in mask_kind else None
    memory_mask = attention_mask(mem_pad) if "memory-padding" in mask_kind else None
    ref_kwargs = {}
    if mask_kind == "causal-float":
        ref_kwargs["tgt_mask"] = float_mask(causal)
    elif "causal" in mask_kind:
        ref_kwargs["tgt_mask"] = ~causal
    if "memory-padding" in mask_kind:
        ref_kwargs["memory_key_padding_mask"] = ~mem_pad

    out, weights = ours(x, memory, self_mask=self_mask, memory_mask=memory_mask)
    ref_out = ref(x_ref, memory_ref, **ref_kwargs)
    assert weights == {"self": None, "cross": None}
    assert_close(out, ref_out, **TOL)
    g = torch.randn_like(out)
    out.backward(g)
    ref_out.backward(g)
    assert_close(x.grad, x_ref.grad, **GRAD_TOL)
    assert_close(memory.grad, memory_ref.grad, **GRAD_TOL)
    assert_close(ours.norm3.weight.grad, ref.norm3.weight.grad, **GRAD_TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_with_tgt_padding_matches_nn_on_real_positions(norm_first, copy_layer):
    ours, ref = make_decoder_pair(norm_first, "relu", copy_layer)
    T, S = 6, 4
    x, memory = torch.randn(2, T, D), torch.randn(2, S, D)
    tgt_pad = padding_mask(torch.tensor([6, 4]))
    self_mask = attention_mask(tgt_pad, causal_mask(T))  # (B, 1, T, T)
    out, _ = ours(x, memory, self_mask=self_mask)
    ref_out = ref(x, memory, tgt_mask=~causal_mask(T), tgt_key_padding_mask=~tgt_pad)
    assert_close(out[tgt_pad], ref_out[tgt_pad], **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_weights(norm_first):
    layer = DecoderLayer(D, H, FF, norm_first=norm_first).eval()
    x, memory = torch.randn(2, 4, D), torch.randn(2, 6, D)
    mem_pad = padding_mask(torch.tensor([6, 3]))
    out, w = layer(x, memory, causal_mask(4), attention_mask(mem_pad), need_weights=True)
    assert w["self"].shape == (2, H, 4, 4) and w["cross"].shape == (2, H, 4, 6)
    assert (w["self"].triu(1) == 0).all()
    assert (w["cross"][1, ..., 3:] == 0).all()
    out2, _ = layer(x, memory, causal_mask(4), attention_mask(mem_pad))
    assert_close(out, out2, **TOL)


def test_decoder_layer_without_cross_attention():
    layer = DecoderLayer(D, H, FF, cross_attention=False).eval()
    assert layer.multihead_attn is None and layer.norm2 is None
    x = torch.randn(2, 4, D)
    out, w = layer(x, self_mask=causal_mask(4), need_weights=True)
    assert out.shape == x.shape and w["cross"] is None and w["self"].shape == (2, H, 4, 4)
    # The same as a decoder-only block of nn: a TransformerEncoderLayer with a causal mask.
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True)
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(torch.cat([layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
                                                      layer.self_attn.v_proj.weight]))
        ref.self_attn.in_proj_bias.copy_(torch.cat([layer.self_attn.q_proj.bias, layer.self_attn.k_proj.bias,
                                                    layer.self_attn.v_proj.bias]))
        ref.self_attn.out_proj.load_state_dict(layer.self_attn.out_proj.state_dict())
        ref.linear1.load_state_dict(layer.ff.linear1.state_dict())
        ref.linear2.load_state_dict(layer.ff.linear2.state_dict())
        ref.norm1.load_state_dict(layer.norm1.state_dict())
        ref.norm2.load_state_dict(layer.norm3.state_dict())
    assert_close(out, ref(x, src_mask=~causal_mask(4)), **TOL)


def test_decoder_layer_requires_memory_for_cross_attention():
    layer = DecoderLayer(D, H, FF)
    with pytest.raises(ValueError, match=r"memory: expected the encoder output \(B, S, D\).*got None"):
        layer(torch.randn(2, 3, D))


@pytest.mark.parametrize("chunks", [[1, 1, 1, 1, 1, 1], [3, 1, 2], [6]])
@pytest.mark.parametrize("cross_attention", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_cache_equals_full_forward(norm_first, cross_attention, chunks):
    layer = DecoderLayer(D, H, FF, norm_first=norm_first, cross_attention=cross_attention).eval()
    T, S = sum(chunks), 5
    x, memory = torch.randn(2, T, D), torch.randn(2, S, D)
    mem_pad = padding_mask(torch.tensor([5, 2]))
    memory_mask = attention_mask(mem_pad) if cross_attention else None
    mem = memory if cross_attention else None
    with torch.no_grad():
        full, _ = layer(x, mem, causal_mask(T), memory_mask)
        cache, outs, t = {}, [], 0
        for n in chunks:
            out, _ = layer(x[:, t:t + n], mem if t == 0 else None, causal_mask(n, t + n), memory_mask, cache=cache)
            outs.append(out)
            t += n
            assert cache["k"].shape == (2, H, t, D // H) and cache["v"].shape == (2, H, t, D // H)
    assert ("memory_k" in cache) == cross_attention
    assert_close(torch.cat(outs, dim=1), full, **TOL)


@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer])
def test_layers_reject_width_other_than_d_model(cls):
    layer = cls(D, H, FF)
    with pytest.raises(ValueError, match=rf"d_model={D}, got shape \(2, 3, 12\)"):
        layer(torch.randn(2, 3, 12), torch.randn(2, 3, D)) if cls is DecoderLayer else layer(torch.randn(2, 3, 12))
