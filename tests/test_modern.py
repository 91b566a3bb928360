"""The pieces of the modern decoder: RMSNorm, SwiGLU, rotary positions, grouped-query attention, and
the Llama-style configuration that combines them (chapters 15 and 16)."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

import tfmini
from tfmini import MultiHeadAttention, RMSNorm, SwiGLU, apply_rope, rope_cos_sin, rotate_half

LLAMA = dict(norm_first=True, norm="rmsnorm", positional="rope", activation="swiglu", attention_bias=False,
             ffn_bias=False, embed_scale=False, tie_weights=False, dropout=0.0)


def llama_config(**kw):
    base = dict(vocab_size=53, d_model=32, num_heads=4, num_kv_heads=2, num_decoder_layers=2, d_ff=48, max_len=40)
    return tfmini.TransformerConfig(**{**base, **LLAMA, **kw})


# ------------------------------------------------------------------------------------------------ RMSNorm
def test_rmsnorm_formula_and_torch():
    torch.manual_seed(0)
    norm = RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 5, 16) * 4 + 1
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    assert_close(norm(x), expected)
    if hasattr(nn, "RMSNorm"):  # torch >= 2.4
        ref = nn.RMSNorm(16, eps=1e-6)
        with torch.no_grad():
            ref.weight.copy_(norm.weight)
        assert_close(norm(x), ref(x))


def test_rmsnorm_equals_layernorm_on_centred_input_and_keeps_half_precision():
    x = torch.randn(4, 16, dtype=torch.float64)
    x = x - x.mean(-1, keepdim=True)
    ln = nn.LayerNorm(16, eps=1e-6, elementwise_affine=False).double()
    assert_close(RMSNorm(16, eps=1e-6).double()(x), ln(x))
    big = torch.full((2, 8), 300.0, dtype=torch.float16)  # 300^2 overflows float16; the float32 sum does not
    out = RMSNorm(8).half()(big)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    with pytest.raises(ValueError, match=r"x: expected last dimension 8, got shape \(2, 7\)"):
        RMSNorm(8)(torch.randn(2, 7))


# ------------------------------------------------------------------------------------------------- SwiGLU
def test_swiglu_formula_and_matched_parameters():
    torch.manual_seed(0)
    d = 48
    ffn = SwiGLU(d, 2 * 4 * d // 3, bias=False)
    x = torch.randn(2, 3, d)
    expected = ffn.linear2(F.silu(ffn.linear_gate(x)) * ffn.linear1(x))
    assert_close(ffn(x), expected)
    plain = tfmini.FeedForward(d, 4 * d, bias=False)
    assert sum(p.numel() for p in ffn.parameters()) == sum(p.numel() for p in plain.parameters())


# ------------------------------------------------------------------------------------------------- RoPE
def test_rope_is_a_rotation_of_each_half_split_pair():
    cos, sin = rope_cos_sin(7, 8, theta=100.0)
    assert cos.shape == sin.shape == (7, 8) and cos.dtype == torch.float32
    assert_close(cos[:, :4], cos[:, 4:])
    theta = 100.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    assert_close(cos[3, :4].double(), torch.cos(3 * theta), atol=1e-7, rtol=0)
    x = torch.randn(2, 7, 8)
    y = apply_rope(x, cos, sin)
    assert_close(y.norm(dim=-1), x.norm(dim=-1))  # rotations keep lengths
    assert_close(rotate_half(rotate_half(x)), -x)
    assert_close(apply_rope(x, *rope_cos_sin(torch.zeros(7, dtype=torch.long), 8)), x)  # position 0: identity


def test_rope_scores_depend_only_on_the_offset():
    torch.manual_seed(0)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)

    def score(m, n):
        cq, sq = rope_cos_sin(torch.tensor([m]), 8)
        ck, sk = rope_cos_sin(torch.tensor([n]), 8)
        return (apply_rope(q[None].float(), cq, sq) @ apply_rope(k[None].float(), ck, sk).T).item()

    for m, n in ((5, 2), (9, 9), (3, 11)):
        for shift in (1, 17, 250):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-4)
    assert abs(score(5, 2) - score(5, 3)) > 1e-3


def test_rope_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"head_dim: expected an even number >= 2, got 7"):
        rope_cos_sin(4, 7)
    cos, sin = rope_cos_sin(4, 8)
    with pytest.raises(ValueError, match=r"cos, sin: expected \(T, Dh\) = \(5, 8\) to match x"):
        apply_rope(torch.randn(2, 5, 8), cos, sin)
    with pytest.raises(ValueError, match=r"length: expected positions offset \+ length <= max_len=6"):
        tfmini.RotaryEmbedding(8, max_len=6)(4, offset=3)


# ------------------------------------------------------------------------------- grouped-query attention
def test_gqa_equals_mha_with_repeated_key_value_heads():
    torch.manual_seed(0)
    D, H, G = 32, 8, 2
    gqa = MultiHeadAttention(D, H, num_kv_heads=G)
    mha = MultiHeadAttention(D, H)
    Dh, r = D // H, H // G
    with torch.no_grad():
        mha.q_proj.load_state_dict(gqa.q_proj.state_dict())
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for src, dst in ((gqa.k_proj, mha.k_proj), (gqa.v_proj, mha.v_proj)):
            # query head h reads key/value head h // r: repeat each of the G heads r times
            dst.weight.copy_(src.weight.reshape(G, Dh, D).repeat_interleave(r, dim=0).reshape(D, D))
            dst.bias.copy_(src.bias.reshape(G, Dh).repeat_interleave(r, dim=0).reshape(D))
    x = torch.randn(2, 6, D)
    for kw in (dict(), dict(is_causal=True), dict(need_weights=True)):
        assert_close(gqa(x, x, x, **kw)[0], mha(x, x, x, **kw)[0])
    y = torch.randn(2, 4, D)  # cross-attention: the separate projections
    assert_close(gqa(y, x, x)[0], mha(y, x, x)[0])
    assert sum(p.numel() for p in gqa.parameters()) < sum(p.numel() for p in mha.parameters())


def test_head_dim_can_differ_from_d_model_over_heads():
    mha = MultiHeadAttention(24, 4, num_kv_heads=2, head_dim=10)
    assert mha.q_proj.weight.shape == (40, 24) and mha.k_proj.weight.shape == (20, 24)
    assert mha.out_proj.weight.shape == (24, 40)
    x = torch.randn(2, 5, 24)
    out, w = mha(x, x, x, need_weights=True)
    assert out.shape == (2, 5, 24) and w.shape == (2, 4, 5, 5)


def test_stacked_projection_follows_parameter_changes_and_keeps_gradients():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2)
    x = torch.randn(1, 3, 16)
    with torch.no_grad():
        before = mha(x, x, x)[0]
        mha.k_proj.weight.mul_(2.0)                    # in place: the stacked copy must be rebuilt
        after = mha(x, x, x)[0]
        q = mha.q_proj(x)
        assert_close(mha.project_qkv(x)[0], q.reshape(1, 3, 4, 4).transpose(1, 2))
    assert not torch.allclose(before, after)
    mha(x, x, x)[0].sum().backward()                   # with gradients: the weights get them
    assert mha.k_proj.weight.grad is not None and mha.q_proj.bias.grad is not None


# ------------------------------------------------------------------------ the Llama-style decoder of tfmini
@pytest.mark.parametrize("kv", [1, 2, 4])
def test_llama_style_decoder_cached_equals_uncached(kv):
    torch.manual_seed(0)
    model = tfmini.DecoderOnlyLM(llama_config(num_kv_heads=kv)).eval()
    prompt = torch.randint(1, 53, (3, 5))
    cached = tfmini.greedy_decode(model, prompt, 12, use_cache=True)
    assert torch.equal(cached, tfmini.greedy_decode(model, prompt, 12, use_cache=False))
    state = model.start_decoding(prompt)
    model.decode_next(prompt, state)
    assert state["cache"][0]["k"].shape == (3, kv, 5, 8)  # the cache holds G heads: memory grows with G


def test_llama_style_decoder_has_no_biases_and_no_positions_table():
    model = tfmini.DecoderOnlyLM(llama_config())
    names = [n for n, _ in model.named_parameters()]
    assert not any(n.endswith("bias") for n in names)
    assert not any(".pos." in n for n in names)                       # RoPE has no parameters
    assert isinstance(model.decoder.norm, RMSNorm) and isinstance(model.decoder.layers[0].ff, SwiGLU)
    assert model.decoder.lm_head.weight is not model.decoder.embed.embedding.weight


def test_rope_model_is_shift_invariant_in_its_attention():
    """With RoPE and no absolute positions, a decoder's first-layer attention scores depend only on
    offsets: the same tokens placed later (after a prefix the queries cannot see beyond) give the
    same scores between them."""
    torch.manual_seed(0)
    cfg = llama_config(num_decoder_layers=1, num_kv_heads=4)
    layer = tfmini.DecoderOnlyLM(cfg).decoder
    attn = layer.layers[0].self_attn
    x = torch.randn(1, 6, 32)
    q, k, _ = attn.project_qkv(x)
    for shift in (0, 9):
        cos, sin = layer.rope(6, offset=shift)
        s = apply_rope(q, cos, sin) @ apply_rope(k, cos, sin).transpose(-1, -2)
        if shift == 0:
            first = s
    assert_close(s, first, atol=1e-5, rtol=0)


def test_embedding_scale_switch():
    torch.manual_seed(0)
    scaled = tfmini.TokenEmbedding(10, 16)
    plain = tfmini.TokenEmbedding(10, 16, scale=False)
    ids = torch.tensor([[1, 2, 3]])
    assert_close(scaled(ids), scaled.embedding(ids) * 4.0)
    assert_close(plain(ids), plain.embedding(ids))
    assert plain.embedding.weight.std().item() == pytest.approx(0.02, rel=0.3)


def test_default_config_is_unchanged():
    """The 2017 Transformer is still the default: no new option changes its parameters."""
    cfg = tfmini.TransformerConfig(vocab_size=50, d_model=32, num_heads=4)
    names = {n for n, _ in tfmini.Transformer(cfg).named_parameters()}
    assert "decoder.pos.embedding.weight" not in names and "decoder.embed.embedding.weight" in names
    assert not any("token_type" in n or "embed_norm" in n or "transform" in n for n in names)
    assert isinstance(tfmini.Transformer(cfg).decoder.layers[0].norm1, nn.LayerNorm)
