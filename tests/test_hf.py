"""tfmini hosts Hugging Face GPT-2, BERT and Llama: same logits, same greedy tokens, offline.

Every model here is a small random-init config built in the test (nothing is downloaded). The
weights are perturbed after initialisation, so that zero biases, unit norm gains or tied copies
cannot hide a weight copied to the wrong place.
"""
import subprocess
import sys

import pytest
import torch

import tfmini

transformers = pytest.importorskip("transformers")
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          LlamaConfig, LlamaForCausalLM)

transformers.logging.set_verbosity_error()
V = 97
TOL = dict(atol=1e-4, rtol=0)


def perturb(model, seed=0, scale=0.05):
    """Add noise to every parameter (a tied matrix once), in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model.eval()


def gpt2(**kw):
    base = dict(n_embd=32, n_layer=2, n_head=4, n_positions=48, vocab_size=V, bos_token_id=1, eos_token_id=2)
    return perturb(GPT2LMHeadModel(GPT2Config(**{**base, **kw})))


def bert(**kw):
    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=40, vocab_size=V,
                max_position_embeddings=48, pad_token_id=0)
    return perturb(BertForMaskedLM(BertConfig(**{**base, **kw})))


def llama(**kw):
    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=40, vocab_size=V, max_position_embeddings=48, bos_token_id=1, eos_token_id=2)
    return perturb(LlamaForCausalLM(LlamaConfig(**{**base, **kw})))


FAMILIES = {
    "gpt2": lambda: gpt2(),
    "gpt2-relu-untied-inner": lambda: gpt2(activation_function="relu", tie_word_embeddings=False, n_inner=24),
    "gpt2-gelu-3layers": lambda: gpt2(activation_function="gelu", n_layer=3, n_head=2, layer_norm_epsilon=1e-3),
    "bert": lambda: bert(),
    "bert-tanh-gelu-untied": lambda: bert(hidden_act="gelu_new", tie_word_embeddings=False, type_vocab_size=3),
    "llama-gqa": lambda: llama(),
    "llama-mha": lambda: llama(num_key_value_heads=4),
    "llama-mqa-head_dim-tied-bias": lambda: llama(num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                                                  attention_bias=True, mlp_bias=True, rope_theta=500.0,
                                                  rms_norm_eps=1e-5),
}


def ids(B=3, T=19, seed=0, low=3):
    return torch.randint(low, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_huggingface(family):
    hf = FAMILIES[family]()
    ours = tfmini.from_huggingface(hf)
    x = ids()
    with torch.no_grad():
        assert_close = torch.testing.assert_close
        assert_close(ours(x), hf(x).logits, **TOL)
    assert not ours.training
    # the head is tied exactly when Hugging Face's is
    head, emb = hf.get_output_embeddings().weight, hf.get_input_embeddings().weight
    stack = ours.decoder if hasattr(ours, "decoder") else ours.encoder
    lm_head = ours.decoder.lm_head if hasattr(ours, "decoder") else ours.lm_head
    assert (lm_head.weight is stack.embed.embedding.weight) == (head.data_ptr() == emb.data_ptr())


def test_bert_padding_is_masked_like_an_attention_mask():
    hf = bert()
    ours = tfmini.from_huggingface(hf)
    x = ids(seed=1)
    x[0, 12:] = 0  # pad_token_id
    x[2, 5:] = 0
    with torch.no_grad():
        ref = hf(x, attention_mask=(x != 0).long()).logits
        got = ours(x)
    real = x != 0  # positions of padding have no meaning on either side; compare the real ones
    torch.testing.assert_close(got[real], ref[real], **TOL)


def test_bert_token_types():
    hf = bert(type_vocab_size=2)
    ours = tfmini.from_huggingface(hf)
    x = ids(seed=2)
    types = torch.zeros_like(x)
    types[:, 9:] = 1
    with torch.no_grad():
        torch.testing.assert_close(ours(x, token_type_ids=types), hf(x, token_type_ids=types).logits, **TOL)
        assert (ours(x, token_type_ids=types) - ours(x)).abs().max() > 1e-3  # the types change the logits
    with pytest.raises(ValueError, match=r"token_type_ids: expected ids in \[0, 1\]"):
        ours(x, token_type_ids=types + 1)


@pytest.mark.parametrize("family", ["gpt2", "llama-gqa", "llama-mqa-head_dim-tied-bias"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_equals_huggingface_greedy(family, use_cache):
    hf = FAMILIES[family]()
    ours = tfmini.from_huggingface(hf)
    prompt = ids(B=2, T=7, seed=3)
    ref = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, do_sample=False,
                      eos_token_id=None, pad_token_id=0)
    got = tfmini.generate(ours, prompt, max_new_tokens=20, use_cache=use_cache)
    assert got.shape == (2, 27)
    assert torch.equal(got[:, :7], prompt)
    assert torch.equal(got, ref)


def test_generate_stops_at_eos_like_huggingface():
    hf = gpt2()
    ours = tfmini.from_huggingface(hf)
    prompt = ids(B=4, T=5, seed=4)
    free = tfmini.generate(ours, prompt, max_new_tokens=25)
    eos = int(free[0, 8])  # a token the first sequence produces: it must stop there
    ref = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=25, do_sample=False,
                      eos_token_id=eos, pad_token_id=0)
    got = tfmini.generate(ours, prompt, max_new_tokens=25, eos_id=eos, pad_id=0)
    assert torch.equal(got, ref)
    first = (got[0, 5:] == eos).nonzero()[0, 0].item()
    assert (got[0, 5 + first + 1:] == 0).all()


def test_generate_uses_the_kv_cache():
    ours = tfmini.from_huggingface(llama())
    seen = []
    decode_next = ours.decode_next

    def spy(ys, state, use_cache=True):
        seen.append(state["cache"][0].get("k", torch.empty(0, 0, 0, 0)).shape[2])
        return decode_next(ys, state, use_cache)

    ours.decode_next = spy
    tfmini.generate(ours, ids(B=1, T=6), max_new_tokens=4)
    assert seen == [0, 6, 7, 8]  # the prompt in one pass, then one new position per step
    # grouped-query attention: the cache holds G = 2 key/value heads, not H = 4
    state = ours.start_decoding(ids(B=1, T=6))
    ours.decode_next(ids(B=1, T=6), state)
    assert state["cache"][0]["k"].shape == (1, 2, 6, 8)


def test_generate_sampling_is_reproducible_and_greedy_at_top_1():
    ours = tfmini.from_huggingface(gpt2())
    prompt = ids(B=2, T=4, seed=5)
    a = tfmini.generate(ours, prompt, 10, do_sample=True, generator=torch.Generator().manual_seed(0))
    b = tfmini.generate(ours, prompt, 10, do_sample=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)
    top1 = tfmini.generate(ours, prompt, 10, do_sample=True, top_k=1, generator=torch.Generator().manual_seed(1))
    assert torch.equal(top1, tfmini.generate(ours, prompt, 10))


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_new_tokens=0), r"max_new_tokens: expected an int >= 1, got 0"),
    (dict(max_new_tokens=2.0), r"max_new_tokens: expected an int >= 1, got 2.0"),
    (dict(max_new_tokens=45), r"max_new_tokens: expected prompt length \+ max_new_tokens <= max_len=48 "
                              r"\(the model's positions\), got 4 \+ 45"),
])
def test_generate_rejects_bad_arguments(kwargs, match):
    ours = tfmini.from_huggingface(gpt2())
    with pytest.raises(ValueError, match=match):
        tfmini.generate(ours, ids(B=1, T=4), **kwargs)


def test_generate_rejects_encoder_decoder_and_bad_prompts():
    cfg = tfmini.TransformerConfig(20, d_model=16, num_heads=2, max_len=16)
    with pytest.raises(ValueError, match=r"model: expected a decoder-only model"):
        tfmini.generate(tfmini.Transformer(cfg).eval(), torch.ones(1, 3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"prompt_ids: expected non-empty token ids of shape \(B, P\), got \(3,\)"):
        tfmini.generate(tfmini.DecoderOnlyLM(cfg).eval(), torch.ones(3, dtype=torch.long), 2)


def test_rejects_other_models_and_variants():
    with pytest.raises(ValueError, match=r"hf_model: expected a transformers model of class GPT2LMHeadModel"):
        tfmini.from_huggingface(torch.nn.Linear(2, 2))
    hf = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=8, vocab_size=V,
                                    scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(ValueError, match=r"scale_attn_by_inverse_layer_idx"):
        tfmini.from_huggingface(hf)
    hf = LlamaForCausalLM(LlamaConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=2, intermediate_size=8, vocab_size=V,
                                      max_position_embeddings=8, hidden_act="gelu"))
    with pytest.raises(ValueError, match=r"hidden_act = 'silu'"):
        tfmini.from_huggingface(hf)
    hf = BertForMaskedLM(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                                    vocab_size=V, max_position_embeddings=8, is_decoder=True))
    with pytest.raises(ValueError, match=r"is_decoder = False"):
        tfmini.from_huggingface(hf)


def test_float64_and_dtype_follow_the_hf_model():
    hf = llama().double()
    ours = tfmini.from_huggingface(hf)
    assert next(ours.parameters()).dtype == torch.float64
    x = ids()
    with torch.no_grad():
        # both sides round RoPE's tables to float32, so float64 agrees to about float32's precision
        torch.testing.assert_close(ours(x), hf(x).logits, atol=1e-5, rtol=0)


def test_parameter_counts_of_the_real_configs():
    """GPT-2 small and BERT-base as chapter 12 counts them: GPT-2 with its tied head (124,439,808),
    BERT-base as ``BertModel``, the encoder with its pooler (a dense layer on the first token) and
    without the masked-LM head (109,482,240)."""
    from transformers import BertModel

    from tfmini.huggingface import _BUILDERS
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        hf_gpt2, hf_mlm, hf_bert = GPT2LMHeadModel(GPT2Config()), BertForMaskedLM(BertConfig()), BertModel(BertConfig())
    gpt2_ours, _ = _BUILDERS["GPT2LMHeadModel"](hf_gpt2)
    assert sum(p.numel() for p in gpt2_ours.parameters()) == sum(p.numel() for p in hf_gpt2.parameters()) == 124_439_808
    bert_ours, _ = _BUILDERS["BertForMaskedLM"](hf_mlm)
    d = hf_bert.config.hidden_size
    encoder = sum(p.numel() for p in bert_ours.encoder.parameters())
    assert encoder + d * d + d == sum(p.numel() for p in hf_bert.parameters()) == 109_482_240
    assert sum(p.numel() for p in bert_ours.parameters()) == sum(p.numel() for p in hf_mlm.parameters())


def test_import_tfmini_does_not_need_transformers():
    code = ("import sys; sys.modules['transformers'] = None; import tfmini; "
            "print(callable(tfmini.from_huggingface), 'transformers' in sys.modules and sys.modules['transformers'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "None"]
