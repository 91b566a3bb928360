"""tfmini.model: the config, the encoder-decoder Transformer, the decoder-only and the encoder-only language models.

Structure and shapes, the encoder stack against ``nn.TransformerEncoder``, weight tying,
``state_dict`` round trips through ``torch.save``/``torch.load(weights_only=True)``, and input validation.
Causal-mask leakage of the models is in test_masks.py, cached decoding in test_decoding.py.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from tfmini import (Decoder, DecoderOnlyLM, Encoder, EncoderOnlyLM, TokenEmbedding, Transformer, TransformerConfig,
                    attention_mask, padding_mask)
from tfmini.positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding

V, V_SRC = 11, 9


def tiny_config(**kw):
    base = dict(vocab_size=V, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32,
                dropout=0.0, max_len=24)
    base.update(kw)
    return TransformerConfig(**base)


def batch(B=3, S=6, T=5, vocab=V, src_vocab=V):
    src = torch.randint(1, src_vocab, (B, S))
    src[1, 4:] = 0  # padding
    src[2, 2:] = 0
    return src, torch.randint(1, vocab, (B, T))


# --------------------------------------------------------------------------------------------- config

def test_config_is_frozen_with_derived_sizes():
    cfg = tiny_config(d_ff=None, src_vocab_size=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 32  # type: ignore[misc]
    assert cfg.ffn_dim == 64 and cfg.source_vocab_size == V
    assert tiny_config(src_vocab_size=V_SRC, d_ff=20).source_vocab_size == V_SRC
    assert tiny_config(d_ff=20).ffn_dim == 20
    assert hash(cfg) == hash(tiny_config(d_ff=None, src_vocab_size=None))


@pytest.mark.parametrize("d_model, num_heads", [(10, 3), (16, 3), (12, 8)])
def test_config_rejects_d_model_not_divisible_by_heads(d_model, num_heads):
    with pytest.raises(ValueError, match=rf"d_model: expected a multiple of num_heads={num_heads}, got d_model={d_model}"):
        tiny_config(d_model=d_model, num_heads=num_heads)


@pytest.mark.parametrize("kw, match", [
    (dict(positional="rotary"), r"positional: expected 'sinusoidal', 'learned' or 'rope', got 'rotary'"),
    (dict(norm="batchnorm"), r"norm: expected one of \['layernorm', 'rmsnorm'\], got 'batchnorm'"),
    (dict(activation="tanh"), r"activation: expected one of \['relu', 'gelu', 'gelu_tanh', 'swiglu'\], got 'tanh'"),
    (dict(num_kv_heads=3), r"num_kv_heads: expected a divisor of num_heads=2, got 3"),
    (dict(head_dim=0), r"head_dim: expected >= 1 or None, got 0"),
    (dict(positional="rope", head_dim=5), r"head_dim: expected an even head width for positional='rope', got 5"),
    (dict(type_vocab_size=-1), r"type_vocab_size: expected >= 0, got -1"),
    (dict(vocab_size=0, pad_id=0), r"vocab_size: expected >= 1, got 0"),
    (dict(max_len=0), r"max_len: expected >= 1, got 0"),
    (dict(num_heads=0), r"num_heads: expected >= 1, got 0"),
    (dict(d_model=0), r"d_model: expected >= 1, got 0"),
    (dict(pad_id=11), r"pad_id: expected in \[0, 10\], got 11"),
    (dict(pad_id=-1), r"pad_id: expected in \[0, 10\], got -1"),
])
def test_config_rejects_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(**kw)


# --------------------------------------------------------------------------------------------- structure

def test_token_embedding_is_scaled_by_sqrt_d():
    emb = TokenEmbedding(V, 16)
    ids = torch.randint(0, V, (2, 5))
    assert_close(emb(ids), emb.embedding.weight[ids] * 4.0, rtol=0, atol=0)


@pytest.mark.parametrize("positional, cls", [("sinusoidal", SinusoidalPositionalEncoding),
                                             ("learned", LearnedPositionalEncoding)])
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_structure(norm_first, positional, cls):
    model = Transformer(tiny_config(norm_first=norm_first, positional=positional, num_encoder_layers=3,
                                    src_vocab_size=V_SRC))
    assert len(model.encoder.layers) == 3 and len(model.decoder.layers) == 2
    assert isinstance(model.encoder.pos, cls) and isinstance(model.decoder.pos, cls)
    final_norm = nn.LayerNorm if norm_first else nn.Identity
    assert isinstance(model.encoder.norm, final_norm) and isinstance(model.decoder.norm, final_norm)
    assert all(layer.norm_first == norm_first for layer in [*model.encoder.layers, *model.decoder.layers])
    assert model.encoder.embed.embedding.num_embeddings == V_SRC
    assert model.decoder.embed.embedding.num_embeddings == V
    assert model.decoder.lm_head.out_features == V


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_forward_shapes_and_weights(norm_first):
    model = Transformer(tiny_config(norm_first=norm_first, src_vocab_size=V_SRC)).eval()
    src, tgt = batch(src_vocab=V_SRC)
    logits = model(src, tgt)
    assert logits.shape == (3, 5, V)
    logits2, w = model(src, tgt, need_weights=True)
    assert_close(logits2, logits, rtol=1e-5, atol=1e-5)
    assert set(w) == {"encoder", "decoder", "cross"}
    assert [x.shape for x in w["encoder"]] == [(3, 2, 6, 6)] * 2
    assert [x.shape for x in w["decoder"]] == [(3, 2, 5, 5)] * 2
    assert [x.shape for x in w["cross"]] == [(3, 2, 5, 6)] * 2
    for cross in w["cross"]:
        assert (cross[1, ..., 4:] == 0).all() and (cross[2, ..., 2:] == 0).all()


def test_encoder_matches_nn_transformer_encoder(copy_layer):
    """The encoder stack after the embedding equals nn.TransformerEncoder with the same layers and mask."""
    cfg = tiny_config(norm_first=True)
    enc = Encoder(cfg).eval()
    ref = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True),
                                num_layers=2, norm=nn.LayerNorm(16), enable_nested_tensor=False)
    for ours, theirs in zip(enc.layers, ref.layers):
        copy_layer(ours, theirs)
    enc.norm.load_state_dict(ref.norm.state_dict())
    src, _ = batch()
    pad = src != 0
    x = enc.pos(enc.embed(src))
    expected = ref(x, src_key_padding_mask=~pad)
    memory, _ = enc(src)
    assert_close(memory[pad], expected[pad], rtol=1e-5, atol=1e-5)


def test_decoder_only_lm_forward():
    model = DecoderOnlyLM(tiny_config()).eval()
    assert model.decoder.layers[0].multihead_attn is None
    ids = torch.randint(1, V, (2, 7))
    logits = model(ids)
    assert logits.shape == (2, 7, V)
    logits2, w = model(ids, need_weights=True)
    assert_close(logits2, logits, rtol=1e-5, atol=1e-5)
    assert [x.shape for x in w] == [(2, 2, 7, 7)] * 2
    assert not any(n.startswith("encoder") for n, _ in model.named_parameters())


@pytest.mark.parametrize("cls", [Transformer, DecoderOnlyLM])
def test_weight_tying(cls):
    tied = cls(tiny_config())
    assert tied.decoder.lm_head.weight is tied.decoder.embed.embedding.weight
    untied = cls(tiny_config(tie_weights=False))
    assert untied.decoder.lm_head.weight is not untied.decoder.embed.embedding.weight
    n_tied = sum(p.numel() for p in tied.parameters())
    n_untied = sum(p.numel() for p in untied.parameters())
    assert n_untied - n_tied == V * 16


def test_dropout_is_active_only_in_training():
    model = Transformer(tiny_config(dropout=0.3))
    src, tgt = batch()
    model.train()
    assert not torch.allclose(model(src, tgt), model(src, tgt))
    model.eval()
    assert torch.equal(model(src, tgt), model(src, tgt))


def test_transformer_gradients_reach_every_parameter():
    model = Transformer(tiny_config(tie_weights=False, positional="learned"))
    src, tgt = batch()
    model(src, tgt).logsumexp(-1).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


# --------------------------------------------------------------------------------------------- save / load

def roundtrip(model, make, tmp_path):
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    torch.manual_seed(1234)  # a differently initialised fresh model
    fresh = make()
    fresh.load_state_dict(torch.load(path, weights_only=True))
    return fresh.eval()


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
@pytest.mark.parametrize("tie", [True, False])
def test_transformer_state_dict_round_trip(tie, positional, tmp_path):
    make = lambda: Transformer(tiny_config(tie_weights=tie, positional=positional, src_vocab_size=V_SRC))  # noqa: E731
    model = make().eval()
    src, tgt = batch(src_vocab=V_SRC)
    fresh_before = make().eval()
    assert not torch.allclose(fresh_before(src, tgt), model(src, tgt))
    fresh = roundtrip(model, make, tmp_path)
    assert torch.equal(fresh(src, tgt), model(src, tgt))
    keys = model.state_dict().keys()
    assert not any(k.endswith("pos.pe") for k in keys)  # the sinusoidal table is not saved
    assert any(k.endswith("pos.embedding.weight") for k in keys) == (positional == "learned")
    assert (fresh.decoder.lm_head.weight is fresh.decoder.embed.embedding.weight) == tie


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_decoder_only_lm_state_dict_round_trip(positional, tmp_path):
    make = lambda: DecoderOnlyLM(tiny_config(positional=positional))  # noqa: E731
    model = make().eval()
    ids = torch.randint(1, V, (2, 9))
    fresh = roundtrip(model, make, tmp_path)
    assert torch.equal(fresh(ids), model(ids))
    assert "pe" not in {k.rsplit(".", 1)[-1] for k in fresh.state_dict()}
    # Still tied after loading: one tensor, and training moves both together.
    assert fresh.decoder.lm_head.weight is fresh.decoder.embed.embedding.weight
    opt = torch.optim.SGD(fresh.parameters(), lr=0.1)
    fresh.train()
    fresh(ids).sum().backward()
    opt.step()
    assert torch.equal(fresh.decoder.lm_head.weight, fresh.decoder.embed.embedding.weight)
    assert not torch.equal(fresh.decoder.lm_head.weight, model.decoder.lm_head.weight)


def test_sinusoidal_table_is_rebuilt_not_loaded(tmp_path):
    model = DecoderOnlyLM(tiny_config())
    fresh = roundtrip(model, lambda: DecoderOnlyLM(tiny_config()), tmp_path)
    assert torch.equal(fresh.decoder.pos.pe, model.decoder.pos.pe)
    assert "decoder.pos.pe" in dict(fresh.named_buffers())


# --------------------------------------------------------------------------------------------- validation

@pytest.mark.parametrize("which, bad_value", [("src", -1), ("src", V_SRC), ("tgt", -3), ("tgt", V)])
def test_transformer_rejects_ids_outside_the_vocabulary(which, bad_value):
    model = Transformer(tiny_config(src_vocab_size=V_SRC))
    src, tgt = batch(src_vocab=V_SRC)
    (src if which == "src" else tgt)[0, 1] = bad_value
    vocab = V_SRC if which == "src" else V
    got = rf"\[{bad_value}, \d+\]" if bad_value < 0 else rf"\[\d+, {bad_value}\]"
    with pytest.raises(ValueError, match=rf"{which}: expected ids in \[0, {vocab - 1}\] \(vocab_size={vocab}\), got values in {got}"):
        model(src, tgt)


@pytest.mark.parametrize("bad_value", [-1, V])
def test_decoder_only_lm_rejects_ids_outside_the_vocabulary(bad_value):
    ids = torch.randint(1, V, (2, 5))
    ids[1, 3] = bad_value
    got = rf"\[{bad_value}, \d+\]" if bad_value < 0 else rf"\[\d+, {bad_value}\]"
    with pytest.raises(ValueError, match=rf"ids: expected ids in \[0, {V - 1}\] \(vocab_size={V}\), got values in {got}"):
        DecoderOnlyLM(tiny_config())(ids)


@pytest.mark.parametrize("src_shape, tgt_shape, which", [
    ((0, 4), (0, 3), "src"), ((2, 0), (2, 3), "src"), ((2, 4), (2, 0), "tgt"),
])
def test_transformer_rejects_empty_batch_or_sequence(src_shape, tgt_shape, which):
    model = Transformer(tiny_config())
    bad = src_shape if which == "src" else tgt_shape
    with pytest.raises(ValueError, match=rf"{which}: expected a non-empty batch and sequence.*\({bad[0]}, {bad[1]}\)"):
        model(torch.ones(src_shape, dtype=torch.long), torch.ones(tgt_shape, dtype=torch.long))


def test_decoder_only_lm_rejects_empty_sequence():
    with pytest.raises(ValueError, match=r"ids: expected a non-empty batch and sequence.*\(2, 0\)"):
        DecoderOnlyLM(tiny_config())(torch.ones(2, 0, dtype=torch.long))


def test_transformer_rejects_batch_size_mismatch():
    model = Transformer(tiny_config())
    with pytest.raises(ValueError, match=r"tgt: expected batch size 3 as in src, got 2"):
        model(torch.ones(3, 4, dtype=torch.long), torch.ones(2, 5, dtype=torch.long))


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
@pytest.mark.parametrize("which, S, T", [("src", 25, 5), ("tgt", 5, 30)])
def test_transformer_rejects_sequence_longer_than_the_positional_table(which, S, T, positional):
    model = Transformer(tiny_config(positional=positional))  # max_len=24
    bad = (2, S) if which == "src" else (2, T)
    with pytest.raises(ValueError, match=rf"{which}: expected at most max_len=24 positions.*got shape \({bad[0]}, {bad[1]}\)"):
        model(torch.ones(2, S, dtype=torch.long), torch.ones(2, T, dtype=torch.long))
    assert model(torch.ones(2, 24, dtype=torch.long), torch.ones(2, 24, dtype=torch.long)).shape == (2, 24, V)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_decoder_only_lm_rejects_sequence_longer_than_the_positional_table(positional):
    model = DecoderOnlyLM(tiny_config(positional=positional))
    with pytest.raises(ValueError, match=r"ids: expected at most max_len=24 positions.*got shape \(1, 25\)"):
        model(torch.ones(1, 25, dtype=torch.long))


def test_transformer_rejects_float_ids():
    with pytest.raises(ValueError, match=r"src: expected an integer dtype, got torch\.float32"):
        Transformer(tiny_config())(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long))


def test_decoder_requires_memory():
    dec = Decoder(tiny_config(), cross_attention=True)
    with pytest.raises(ValueError, match=r"memory: expected the encoder output"):
        dec(torch.ones(2, 3, dtype=torch.long))


def test_encoder_with_padding_mask_helper_agrees():
    """The encoder's own padding mask is the one attention_mask builds from the source's pad positions."""
    cfg = tiny_config()
    enc = Encoder(cfg).eval()
    src, _ = batch()
    memory, w = enc(src, need_weights=True)
    mask = attention_mask(padding_mask((src != 0).sum(1), src.shape[1]))
    x = enc.pos(enc.embed(src))
    for layer in enc.layers:
        x, _ = layer(x, mask)
    assert_close(memory, enc.norm(x), rtol=1e-6, atol=1e-6)
    assert len(w) == 2


# --------------------------------------------------------------------------------------------- encoder-only

@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_only_lm_forward_and_hidden_states(norm_first):
    model = EncoderOnlyLM(tiny_config(norm_first=norm_first, num_encoder_layers=3)).eval()
    assert len(model.encoder.layers) == 3
    ids = torch.randint(1, V, (2, 7))
    logits = model(ids)
    assert logits.shape == (2, 7, V)
    z = model.hidden_states(ids)
    assert z.shape == (2, 7, 16)
    assert_close(logits, z @ model.encoder.embed.embedding.weight.T)  # tied output projection
    logits2, w = model(ids, need_weights=True)
    assert_close(logits2, logits, rtol=1e-5, atol=1e-5)
    assert [x.shape for x in w] == [(2, 2, 7, 7)] * 3
    z2, w2 = model.hidden_states(ids, need_weights=True)
    assert_close(z2, z, rtol=1e-5, atol=1e-5) and len(w2) == 3


def test_encoder_only_lm_has_no_causal_mask():
    """A later token changes the output at an earlier position (a decoder-only model's would not change)."""
    torch.manual_seed(0)
    enc, dec = EncoderOnlyLM(tiny_config()).eval(), DecoderOnlyLM(tiny_config()).eval()
    ids = torch.randint(1, V, (1, 8))
    later = ids.clone()
    later[0, 6] = 1 + ids[0, 6] % (V - 1)  # another token at position 6
    with torch.no_grad():
        changed_enc = (enc(ids) - enc(later)).abs().amax(dim=-1)[0]  # (T,)
        changed_dec = (dec(ids) - dec(later)).abs().amax(dim=-1)[0]
    assert (changed_enc[:6] > 1e-4).all()
    assert (changed_dec[:6] == 0).all()
    _, w = enc(ids, need_weights=True)
    assert (w[0][0].triu(diagonal=1) > 0).any()  # weights above the diagonal: queries read later keys


def test_encoder_only_lm_masks_padding_keys():
    model = EncoderOnlyLM(tiny_config()).eval()
    ids = torch.randint(1, V, (2, 6))
    ids[1, 4:] = 0
    _, w = model(ids, need_weights=True)
    for layer in w:
        assert (layer[1, ..., 4:] == 0).all() and (layer[0] > 0).all()


def test_encoder_only_and_decoder_only_have_the_same_parameter_count():
    """Same width, depth and vocabulary: an encoder layer and a decoder layer without cross-attention hold the
    same weights; only the mask differs."""
    for norm_first in (False, True):
        enc = EncoderOnlyLM(tiny_config(norm_first=norm_first, num_encoder_layers=3))
        dec = DecoderOnlyLM(tiny_config(norm_first=norm_first, num_decoder_layers=3))
        assert sum(p.numel() for p in enc.parameters()) == sum(p.numel() for p in dec.parameters())


@pytest.mark.parametrize("tie", [True, False])
def test_encoder_only_lm_weight_tying_and_round_trip(tie, tmp_path):
    make = lambda: EncoderOnlyLM(tiny_config(tie_weights=tie, positional="learned"))  # noqa: E731
    model = make().eval()
    assert (model.lm_head.weight is model.encoder.embed.embedding.weight) == tie
    ids = torch.randint(1, V, (2, 9))
    fresh = roundtrip(model, make, tmp_path)
    assert torch.equal(fresh(ids), model(ids))
    assert (fresh.lm_head.weight is fresh.encoder.embed.embedding.weight) == tie


def test_encoder_only_lm_gradients_reach_every_parameter():
    model = EncoderOnlyLM(tiny_config(tie_weights=False, positional="learned"))
    model(torch.randint(1, V, (2, 6))).logsumexp(-1).sum().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0] == []


@pytest.mark.parametrize("bad_value", [-1, V])
def test_encoder_only_lm_rejects_ids_outside_the_vocabulary(bad_value):
    ids = torch.randint(1, V, (2, 5))
    ids[0, 2] = bad_value
    got = rf"\[{bad_value}, \d+\]" if bad_value < 0 else rf"\[\d+, {bad_value}\]"
    model = EncoderOnlyLM(tiny_config())
    for call in (model, model.hidden_states):
        with pytest.raises(ValueError, match=rf"ids: expected ids in \[0, {V - 1}\] \(vocab_size={V}\), got values in {got}"):
            call(ids)


def test_encoder_only_lm_rejects_bad_shapes_and_configs():
    model = EncoderOnlyLM(tiny_config())
    with pytest.raises(ValueError, match=r"ids: expected at most max_len=24 positions.*got shape \(1, 25\)"):
        model(torch.ones(1, 25, dtype=torch.long))
    with pytest.raises(ValueError, match=r"ids: expected token ids of shape \(B, T\), got \(5,\)"):
        model(torch.ones(5, dtype=torch.long))
    with pytest.raises(ValueError, match=rf"src_vocab_size: expected None or vocab_size={V} for an encoder-only model.*got {V_SRC}"):
        EncoderOnlyLM(tiny_config(src_vocab_size=V_SRC))
    assert EncoderOnlyLM(tiny_config(src_vocab_size=V)).encoder.embed.embedding.num_embeddings == V


def test_kv_cache_knows_its_length_and_survives_reordering():
    from tfmini import KVCache, select_batch
    torch.manual_seed(0)
    model = DecoderOnlyLM(tiny_config()).eval()
    state = model.start_decoding()
    assert isinstance(state["cache"], KVCache) and state["cache"].length == 0
    ids = torch.randint(1, V, (3, 5))
    model.decode_next(ids, state)
    assert state["cache"].length == 5
    moved = select_batch(state, torch.tensor([2, 0]))
    assert isinstance(moved["cache"], KVCache) and moved["cache"].length == 5
    assert moved["cache"][0]["k"].shape[0] == 2


def test_encoder_only_forward_uses_the_fused_kernel_unless_weights_are_asked(monkeypatch):
    """Without need_weights the encoder-only model must not take the explicit path (which materialises
    the weights and rounds differently from the fused kernel)."""
    import tfmini.attention as attention
    torch.manual_seed(0)
    model = EncoderOnlyLM(tiny_config()).eval()
    ids = torch.randint(1, V, (2, 6))
    with_weights, _ = model(ids, need_weights=True)

    def refuse(*args, **kwargs):
        raise AssertionError("explicit attention path used")

    monkeypatch.setattr(attention, "scaled_dot_product_attention", refuse)
    assert_close(model(ids), with_weights, atol=1e-5, rtol=0)


def test_kv_cache_is_written_in_place_not_copied_at_every_step():
    """A KVCache's layers write each step's keys and values into buffers allocated ahead: the prompt's
    positions into a buffer of their size, then, with ``reserve``, every later step into one buffer
    allocated once at the first step; "k" and "v" are views of their first t positions (a plain dict,
    as a layer's own cache is: nothing more). Past the reservation the buffer doubles."""
    from tfmini import KVCache
    torch.manual_seed(0)
    model = DecoderOnlyLM(tiny_config(num_kv_heads=1)).eval()
    prompt = torch.randint(1, V, (3, 4))
    state = model.start_decoding(prompt)
    state["cache"].reserve(4 + 6)
    ys, storages, sizes = prompt, [], []
    with torch.no_grad():
        for t in range(8):  # the cache holds 4, 5, ..., 11 positions
            nxt = model.decode_next(ys, state).argmax(-1, keepdim=True)
            layer = state["cache"][0]
            storages.append(layer["k"].untyped_storage().data_ptr())
            sizes.append(layer._buffers[0].shape[2])
            assert layer.keys() == {"k", "v"} and layer["k"].shape == (3, 1, ys.shape[1], 8)
            ys = torch.cat([ys, nxt], dim=1)
    assert sizes == [4] + [10] * 6 + [20]
    assert len(set(storages[1:7])) == 1 and storages[7] != storages[6]  # steps 5..10 write in place
    assert isinstance(state["cache"], KVCache) and state["cache"].length == ys.shape[1] - 1
    # without a reservation the buffers grow geometrically: a few allocations over many steps
    state, grown = model.start_decoding(prompt), set()
    with torch.no_grad():
        for t in range(4, 24):
            model.decode_next(torch.randint(1, V, (3, t)), state)
            grown.add(state["cache"][1]["v"].untyped_storage().data_ptr())
    assert len(grown) <= 4


def test_kv_cache_in_a_plain_list_of_dicts_still_works():
    """The decoder's layers also fill plain dicts (chapter 10 builds its own cache that way): the same
    logits as a KVCache, and as the full forward."""
    torch.manual_seed(0)
    model = DecoderOnlyLM(tiny_config()).eval()
    ids = torch.randint(1, V, (2, 7))
    plain, kv = [{} for _ in model.decoder.layers], model.decoder.new_cache()
    with torch.no_grad():
        full = model(ids)
        for t in range(7):
            a, _ = model.decoder(ids[:, t:t + 1], cache=plain)
            b, _ = model.decoder(ids[:, t:t + 1], cache=kv)
            assert torch.equal(a, b)
            assert_close(a[:, 0], full[:, t], rtol=1e-5, atol=1e-5)
    assert all(type(layer) is dict and layer["k"].shape[2] == 7 for layer in plain)
    for p, k in zip(plain, kv):
        assert p.keys() == k.keys() and torch.equal(p["k"], k["k"]) and torch.equal(p["v"], k["v"])


def test_kv_cache_reordered_keeps_its_room_and_its_values():
    from tfmini import KVCache, select_batch
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    src, tgt = torch.randint(1, V, (3, 6)), torch.randint(1, V, (3, 4))
    state = model.start_decoding(src)
    state["cache"].reserve(10)
    with torch.no_grad():
        model.decode_next(tgt[:, :3], state)  # the first positions, then one step into the reserved buffer
        model.decode_next(tgt, state)
        index = torch.tensor([2, 2, 0])
        moved = select_batch(state, index)
        assert isinstance(moved["cache"], KVCache)
        for before, after in zip(state["cache"], moved["cache"]):
            assert after.keys() == {"k", "v", "memory_k", "memory_v"}
            for name in after:
                assert torch.equal(after[name], before[name][index])
            assert after._buffers[0].shape[2] == 10  # the room stays: the next steps write in place
        a = model.decode_next(torch.cat([tgt[index], tgt[index, :1]], 1), moved)
        b = model.decode_next(torch.cat([tgt, tgt[:, :1]], 1), state)
    assert_close(a, b[index], rtol=1e-5, atol=1e-6)


def test_decoder_only_lm_rejects_bad_attention_masks():
    model = DecoderOnlyLM(tiny_config()).eval()
    ids = torch.randint(1, V, (2, 5))
    with pytest.raises(ValueError, match=r"attention_mask: expected a bool tensor of shape \(2, 5\) as the ids .*"
                                         r"got torch.int64 of shape \(2, 5\)"):
        model(ids, attention_mask=torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attention_mask: expected a bool tensor of shape \(2, 5\).*got torch.bool "
                                         r"of shape \(2, 4\)"):
        model(ids, attention_mask=torch.ones(2, 4, dtype=torch.bool))
    empty = torch.ones(2, 5, dtype=torch.bool)
    empty[1] = False
    with pytest.raises(ValueError, match=r"attention_mask: expected at least one real token \(True\) in every row, "
                                         r"got none in rows \[1\]"):
        model(ids, attention_mask=empty)
    with pytest.raises(ValueError, match=r"attention_mask: expected at least one real token"):
        model.start_decoding(ids, attention_mask=empty)
    with pytest.raises(ValueError, match=r"prompt: expected the prompt \(B, t\) that attention_mask describes, got None"):
        model.start_decoding(attention_mask=empty)
