"""tfmini on a CUDA GPU, with inputs built on the CPU as the course builds them (skipped without CUDA).

- ``fit`` trains a tiny Transformer, an RNN with attention, a decoder-only and an encoder-only model
  on the GPU from CPU batches, and the loss falls;
- greedy decoding (cached = uncached), beam search and sampling run on the GPU; sources and prompts
  built on the CPU are moved to the model and the tokens come back to the CPU; a CPU generator gives
  the same samples as on the CPU, a CUDA generator works too;
- ``decode_next`` never synchronises with the GPU (``torch.cuda.set_sync_debug_mode("error")``);
- ``evaluate`` and ``evaluate_by_length`` score a model on the GPU from CPU batches and pairs;
- the pre-training helpers (``mask_tokens``, ``masked_lm_loss``, ``lm_windows``) work with ids on the
  GPU and a CPU or CUDA generator; a CPU generator corrupts GPU ids exactly as it corrupts CPU ids;
- fp16/bf16 attention gives zeros, not NaN, for a query that may attend to nothing;
- ``fit_or_load`` loads on the GPU a checkpoint made on a CPU-only machine, and the other way round.

tests/test_devices.py checks on any machine what can be checked without a GPU.
"""
from __future__ import annotations

import copy
from functools import partial

import pytest
import torch

import tfmini
from tfmini import (IGNORE_INDEX, AttentionSeq2SeqRNN, Batches, DecoderOnlyLM, EncoderOnlyLM, MultiHeadAttention,
                    Transformer, TransformerConfig, Vocab, beam_search, encode_pairs, evaluate, evaluate_by_length, fit,
                    fit_or_load, greedy_decode, lm_windows, mask_tokens, masked_lm_loss, python_source_text, sample,
                    train_val_split)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CUDA = torch.device("cuda")
TRAIN = dict(lr=3e-3, warmup_steps=20, progress=False, log_every=1)


def falls(loss, n=10, factor=0.7):
    """The mean of the last ``n`` logged losses is below ``factor`` times the mean of the first ``n``."""
    first, last = sum(loss[:n]) / n, sum(loss[-n:]) / n
    return last < factor * first


@pytest.fixture(scope="module")
def copy_setup():
    pairs = tfmini.copy_task(600, 3, 8, num_symbols=8, seed=0)
    vocab = Vocab.build(s for s, _ in pairs)
    return pairs, vocab, encode_pairs(pairs, vocab, vocab)


@pytest.fixture(scope="module")
def trained(copy_setup):
    """A Transformer trained on the GPU from CPU batches; its loss history; CPU validation batches."""
    pairs, vocab, data = copy_setup
    tfmini.set_seed(0)
    cfg = TransformerConfig(len(vocab), d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                            d_ff=64, dropout=0.0, max_len=32)
    model = Transformer(cfg)
    history = fit(model, Batches(data, 32, seed=0), steps=400, **TRAIN)
    val = Batches(data[:128], 64, shuffle=False)
    return model, history, val, vocab


# --------------------------------------------------------------------------------------------- training

def test_fit_trains_a_transformer_on_the_gpu_from_cpu_batches(trained):
    model, history, val, _ = trained
    assert all(p.device.type == "cuda" for p in model.parameters())
    assert len(history.loss) == 400 and falls(history.loss, factor=0.3), history.loss[::50]
    scores = evaluate(model, val, max_len=10, bos_id=Vocab.bos_id, eos_id=Vocab.eos_id)
    assert scores["seq_acc"] > 0.5, scores


def test_fit_trains_an_rnn_with_attention_on_the_gpu(copy_setup):
    pairs, vocab, data = copy_setup
    tfmini.set_seed(0)
    rnn = AttentionSeq2SeqRNN(len(vocab), len(vocab), d_emb=16, d_hidden=32)
    history = fit(rnn, Batches(data, 32, seed=0), steps=150, **TRAIN)
    assert next(rnn.parameters()).device.type == "cuda" and falls(history.loss)
    src, _ = next(iter(Batches(data[:16], 16, shuffle=False)))  # on the CPU
    out = greedy_decode(rnn, src, 10, Vocab.bos_id, Vocab.eos_id)
    assert out.device.type == "cpu" and torch.equal(out, greedy_decode(rnn, src.to(CUDA), 10, Vocab.bos_id,
                                                                       Vocab.eos_id).cpu())


# --------------------------------------------------------------------------------------------- decoding

def test_greedy_cached_equals_uncached_and_cpu_sources_come_back_to_the_cpu(trained):
    model, _, val, _ = trained
    src, _ = next(iter(val))
    cached = greedy_decode(model, src.to(CUDA), 12, Vocab.bos_id, Vocab.eos_id, use_cache=True)
    uncached = greedy_decode(model, src.to(CUDA), 12, Vocab.bos_id, Vocab.eos_id, use_cache=False)
    assert cached.device.type == "cuda" and torch.equal(cached, uncached)
    from_cpu = greedy_decode(model, src, 12, Vocab.bos_id, Vocab.eos_id)
    assert from_cpu.device.type == "cpu" and torch.equal(from_cpu, cached.cpu())


def test_beam_search_on_the_gpu(trained):
    model, _, val, vocab = trained
    src, _ = next(iter(val))
    beams = beam_search(model, src.to(CUDA), 12, 4, Vocab.bos_id, Vocab.eos_id, length_penalty=0.6)
    assert beams.device.type == "cuda" and beams.shape[0] == src.shape[0] and beams.shape[1] <= 12
    assert 0 <= int(beams.min()) and int(beams.max()) < len(vocab)
    from_cpu = beam_search(model, src, 12, 4, Vocab.bos_id, Vocab.eos_id, length_penalty=0.6)
    assert from_cpu.device.type == "cpu" and torch.equal(from_cpu, beams.cpu())
    scores = evaluate(model, val, max_len=10, bos_id=Vocab.bos_id, eos_id=Vocab.eos_id, beam_size=3)
    assert 0.0 <= scores["seq_acc"] <= 1.0


def test_sampling_with_a_cpu_generator_matches_the_cpu(trained):
    """A reader's CPU generator with a model on the GPU: the draws are made on the CPU, so they are
    those of the same model on the CPU (the probabilities differ only in rounding, far too little to
    move a draw of a trained model)."""
    model, _, val, _ = trained
    src, _ = next(iter(val))
    kw = dict(temperature=1.0, bos_id=Vocab.bos_id, eos_id=Vocab.eos_id)
    a = sample(model, src.to(CUDA), 10, generator=torch.Generator().manual_seed(0), **kw)
    b = sample(model, src, 10, generator=torch.Generator().manual_seed(0), **kw)
    assert a.device.type == "cuda" and b.device.type == "cpu" and torch.equal(a.cpu(), b)
    on_cpu = copy.deepcopy(model).cpu()
    assert torch.equal(sample(on_cpu, src, 10, generator=torch.Generator().manual_seed(0), **kw), b)


def test_sampling_with_a_cuda_generator(trained):
    model, _, val, vocab = trained
    src, _ = next(iter(val))
    runs = [sample(model, src.to(CUDA), 10, temperature=1.5, top_k=4, bos_id=Vocab.bos_id, eos_id=Vocab.eos_id,
                   generator=torch.Generator(device=CUDA).manual_seed(1)) for _ in range(2)]
    assert runs[0].device.type == "cuda" and torch.equal(runs[0], runs[1])
    assert 0 <= int(runs[0].min()) and int(runs[0].max()) < len(vocab)
    from_cpu = sample(model, src, 10, bos_id=Vocab.bos_id, generator=torch.Generator(device=CUDA).manual_seed(1))
    assert from_cpu.device.type == "cpu"


@pytest.mark.parametrize("use_cache", [True, False])
def test_decode_next_does_not_synchronise(trained, use_cache):
    model, _, val, _ = trained
    src = next(iter(val))[0].to(CUDA)
    greedy_decode(model, src, 6, Vocab.bos_id, use_cache=use_cache)  # warm-up: kernels, allocator
    with torch.no_grad():
        state = model.start_decoding(src)  # checks the source's ids: one synchronisation, here
        ys = torch.full((src.shape[0], 1), Vocab.bos_id, device=CUDA)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(6):
                nxt = model.decode_next(ys, state, use_cache).argmax(-1)  # (B,)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert ys.shape == (src.shape[0], 7)


def test_evaluate_by_length_from_cpu_pairs(trained, copy_setup):
    model, _, _, vocab = trained
    pairs = copy_setup[0][:200]
    rows = evaluate_by_length(model, pairs, vocab, vocab, bin_width=3, max_len=10)
    assert sum(r["n"] for r in rows) == len(pairs)
    assert all(0.0 <= r["seq_acc"] <= 1.0 and 0.0 <= r["token_acc"] <= 1.0 for r in rows)
    on_cpu = evaluate_by_length(copy.deepcopy(model).cpu(), pairs, vocab, vocab, bin_width=3, max_len=10)
    assert [(r["lo"], r["hi"], r["n"]) for r in rows] == [(r["lo"], r["hi"], r["n"]) for r in on_cpu]
    # the same model on the CPU: the same scores, up to a decision that the devices' rounding flips
    assert all(abs(g["seq_acc"] - c["seq_acc"]) <= 1 / g["n"] + 1e-9 for g, c in zip(rows, on_cpu))


# --------------------------------------------------------------------------------------------- pre-training

def test_mask_tokens_with_a_cpu_generator_corrupts_gpu_ids_as_cpu_ids():
    ids = torch.randint(5, 50, (16, 40), generator=torch.Generator().manual_seed(0))
    on_gpu = mask_tokens(ids.to(CUDA), 4, 50, generator=torch.Generator().manual_seed(3))
    on_cpu = mask_tokens(ids, 4, 50, generator=torch.Generator().manual_seed(3))
    assert all(x.device.type == "cuda" for x in on_gpu)
    assert all(torch.equal(g.cpu(), c) for g, c in zip(on_gpu, on_cpu))
    g1 = mask_tokens(ids.to(CUDA), 4, 50, generator=torch.Generator(device=CUDA).manual_seed(3))
    g2 = mask_tokens(ids.to(CUDA), 4, 50, generator=torch.Generator(device=CUDA).manual_seed(3))
    assert g1[0].device.type == "cuda" and all(torch.equal(a, b) for a, b in zip(g1, g2))
    assert (g1[1] != IGNORE_INDEX).sum(dim=1).eq(6).all()  # round(0.15 * 40)


def test_encoder_only_model_trains_with_masked_lm_loss_on_the_gpu():
    ids = torch.randint(5, 50, (256, 24), generator=torch.Generator().manual_seed(0))
    ids[:, 1::2] = ids[:, 0::2]  # every odd token repeats its left neighbour: learnable from context
    tfmini.set_seed(0)
    mlm = EncoderOnlyLM(TransformerConfig(50, d_model=32, num_heads=4, num_encoder_layers=2, dropout=0.0, max_len=24))
    loss_fn = partial(masked_lm_loss, mask_id=4, generator=torch.Generator().manual_seed(0))  # a CPU generator
    history = fit(mlm, Batches(ids.tolist(), 32, seed=0), steps=200, loss_fn=loss_fn, **TRAIN)
    assert next(mlm.parameters()).device.type == "cuda" and falls(history.loss, factor=0.9), history.loss[::20]
    loss = masked_lm_loss(mlm, ids[:8].to(CUDA), mask_id=4, generator=torch.Generator(device=CUDA).manual_seed(1))
    assert loss.device.type == "cuda" and torch.isfinite(loss)
    with torch.no_grad():
        assert mlm.hidden_states(ids[:2].to(CUDA)).shape == (2, 24, 32)


def test_decoder_only_model_trains_on_lm_windows_on_the_gpu():
    text = python_source_text(("textwrap",), max_chars=30_000)
    vocab = Vocab(list(text))
    train_ids, val_ids = train_val_split(vocab.encode(list(text)))
    windows = lm_windows(train_ids, 33, stride=16)
    tfmini.set_seed(0)
    gpt = DecoderOnlyLM(TransformerConfig(len(vocab), d_model=32, num_heads=4, num_decoder_layers=2, dropout=0.0,
                                          max_len=64, norm_first=True, positional="learned"))
    history = fit(gpt, Batches(windows, 32, seed=0), steps=150, **TRAIN)
    assert next(gpt.parameters()).device.type == "cuda" and falls(history.loss), history.loss[::15]
    val = torch.tensor(lm_windows(val_ids, 33))  # on the CPU
    with torch.no_grad():
        val_loss = tfmini.batch_loss(gpt, val.to(CUDA))
    assert torch.isfinite(val_loss)
    # chapter 12's generate(): prompt and generator on the CPU, the model on the GPU
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([vocab.encode(list("def "))])
    new = sample(gpt, ids, 20, temperature=0.8, generator=g)
    assert new.device.type == "cpu" and torch.cat([ids, new], dim=1).shape == (1, 24)
    cached = greedy_decode(gpt, ids.to(CUDA), 20, use_cache=True)
    assert torch.equal(cached, greedy_decode(gpt, ids.to(CUDA), 20, use_cache=False))


# --------------------------------------------------------------------------------------------- precision

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("need_weights", [False, True])
def test_half_precision_attention_zeroes_fully_masked_rows(dtype, need_weights):
    if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4).to(CUDA, dtype)
    x = torch.randn(3, 5, 32, device=CUDA, dtype=dtype, requires_grad=True)
    keys = torch.tensor([[True] * 5, [True, True, False, False, False], [False] * 5], device=CUDA)  # (B, S)
    out, w = mha(x, x, x, attn_mask=keys[:, None, None, :], need_weights=need_weights)
    assert out.dtype == dtype and not torch.isnan(out).any()
    assert torch.equal(out[2], torch.zeros_like(out[2]).add_(mha.out_proj.bias))  # no key: output = out_proj(0)
    if need_weights:
        assert not torch.isnan(w).any() and (w[2] == 0).all() and (w[1, :, :, 2:] == 0).all()
    out.float().sum().backward()
    assert torch.isfinite(x.grad).all()


# --------------------------------------------------------------------------------------------- checkpoints

@pytest.mark.parametrize("trained_on, loaded_on", [("cpu", "cuda"), ("cuda", "cpu")])
def test_fit_or_load_round_trip_between_cpu_and_gpu(copy_setup, tmp_path, monkeypatch, trained_on, loaded_on):
    """A checkpoint made on one kind of machine (``default_device()`` gives ``trained_on``) loads on the
    other, onto its default device, with the same weights."""
    _, vocab, data = copy_setup
    cfg = TransformerConfig(len(vocab), d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                            dropout=0.0, max_len=32)

    def run(device):
        # both places that ask for the default device: fit (training) and fit_or_load (loading)
        monkeypatch.setattr(tfmini.train, "default_device", lambda: torch.device(device))
        monkeypatch.setattr(tfmini.checkpoint, "default_device", lambda: torch.device(device))
        tfmini.set_seed(0)
        model = Transformer(cfg)
        history = fit_or_load(model, Batches(data, 32, seed=0), name="round-trip", cache_dir=tmp_path, steps=10,
                              lr=3e-3, progress=False)
        return model, history

    a, h1 = run(trained_on)
    b, h2 = run(loaded_on)
    assert not h1.loaded and h2.loaded and h2.loss == h1.loss
    assert {p.device.type for p in a.parameters()} == {trained_on}
    assert {p.device.type for p in b.parameters()} == {loaded_on}
    assert all(torch.equal(p.cpu(), q.cpu()) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("kv", [1, 4])
def test_llama_style_decoder_on_the_gpu_from_cpu_prompts(kv):
    """RoPE tables, RMSNorm and grouped-query attention on the GPU: cached decoding equals uncached,
    the logits equal the CPU model's, decode_next does not synchronise, and tfmini.generate returns
    the prompt and the new tokens on the prompt's device."""
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=50, d_model=32, num_heads=4, num_kv_heads=kv, num_decoder_layers=2, d_ff=48,
                            max_len=40, dropout=0.0, norm_first=True, norm="rmsnorm", positional="rope",
                            activation="swiglu", attention_bias=False, ffn_bias=False, embed_scale=False)
    cpu = DecoderOnlyLM(cfg).eval()
    gpu = copy.deepcopy(cpu).to(CUDA)
    prompt = torch.randint(1, 50, (3, 6))
    with torch.no_grad():
        torch.testing.assert_close(gpu(prompt.to(CUDA)).cpu(), cpu(prompt), atol=1e-4, rtol=1e-4)
    out = tfmini.generate(gpu, prompt, max_new_tokens=10)
    assert out.device.type == "cpu" and torch.equal(out[:, :6], prompt)
    assert torch.equal(out, tfmini.generate(gpu, prompt, max_new_tokens=10, use_cache=False))
    state = gpu.start_decoding(prompt.to(CUDA))
    ys = prompt.to(CUDA)
    with torch.no_grad():
        gpu.decode_next(ys, state)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            gpu.decode_next(torch.cat([ys, ys[:, :1]], dim=1), state)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def test_from_huggingface_keeps_the_gpu():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=40,
        vocab_size=60, max_position_embeddings=32)).to(CUDA).eval()
    ours = tfmini.from_huggingface(hf)
    assert next(ours.parameters()).device.type == "cuda"
    ids = torch.randint(0, 60, (2, 9), device=CUDA)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                      eos_token_id=None, pad_token_id=0)
    assert torch.equal(tfmini.generate(ours, ids, max_new_tokens=8), ref)
