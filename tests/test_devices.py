"""Device behaviour that a CPU-only machine can check (tests/test_cuda.py checks the rest on a GPU).

- the per-token paths (``decode_next``, greedy decoding and beam search without EOS, fused attention
  with masks, a model's forward) never read a tensor's value on the host, the reads that on a GPU
  wait for it to finish: a ``TorchDispatchMode`` records every such read (``item``, ``bool``,
  ``nonzero``, boolean indexing). It cannot see ``.tolist()`` of a CPU tensor, so the ids' range
  check is counted separately: once per call at the model's entry point, never per token;
- random draws are made on the generator's device and moved to the inputs' device: ids on the
  ``meta`` device (no data) with a CPU generator advance the generator exactly as CPU ids do, and
  sampling hands the probabilities to a generator's device (a mocked ``torch.multinomial``, since a
  CPU-only machine has no second real device for a generator); with CPU inputs the draws are those
  of the earlier implementation, bit for bit (pinned values);
- ids are checked once, and ``check_range=False`` skips only the range; a bad ``bos_id`` is still an
  error although ``decode_next`` no longer checks the ids it is given.
"""
from __future__ import annotations

import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tfmini
from tfmini import (IGNORE_INDEX, AttentionSeq2SeqRNN, DecoderOnlyLM, EncoderOnlyLM, MultiHeadAttention, TokenEmbedding,
                    Transformer, TransformerConfig, beam_search, greedy_decode, mask_tokens, masked_lm_loss, sample)
from tfmini._checks import check_token_ids

V, BOS, EOS, PAD = 12, 1, 2, 0


class HostReads(TorchDispatchMode):
    """Records every operator that copies a tensor's value to the host (a synchronisation on a GPU)."""

    READS = {"_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "equal", "item"}

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        indices = args[1] if name in ("index", "index_put", "index_put_") and len(args) > 1 else ()
        bool_index = any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in indices)
        if name in self.READS or bool_index:
            self.seen.append(func.__name__)
        return func(*args, **(kwargs or {}))


def config(**kw):
    base = dict(vocab_size=V, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32,
                dropout=0.0, max_len=40)
    base.update(kw)
    return TransformerConfig(**base)


def source(B=3, S=6):
    src = torch.randint(4, V, (B, S))
    src[1, 4:] = PAD
    return src


# --------------------------------------------------------------------------------------------- host reads

@pytest.mark.parametrize("kind", ["transformer", "lm", "rnn"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_decode_next_never_reads_a_value_on_the_host(kind, use_cache):
    inputs = source()
    if kind == "transformer":
        model, ys = Transformer(config()).eval(), torch.full((3, 1), BOS)
    elif kind == "lm":
        model, ys = DecoderOnlyLM(config(norm_first=True, positional="learned")).eval(), inputs
    else:
        model, ys = AttentionSeq2SeqRNN(V, V, d_emb=8, d_hidden=16).eval(), torch.full((3, 1), BOS)
    with torch.no_grad():
        state = model.start_decoding(inputs)  # checks the inputs: reads them, once
        with HostReads() as reads:
            for _ in range(4):
                nxt = model.decode_next(ys, state, use_cache).argmax(-1)  # (B,)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
    assert reads.seen == []


@pytest.mark.parametrize("decode", [
    lambda m, x: greedy_decode(m, x, 6, BOS),
    lambda m, x: greedy_decode(m, x, 6, BOS, use_cache=False),
    lambda m, x: beam_search(m, x, 6, 3, BOS, length_penalty=0.6),
], ids=["greedy", "greedy-uncached", "beam"])
def test_decoding_without_eos_never_reads_a_value_on_the_host(decode):
    """Without an EOS to wait for, a whole decoding loop runs without one host read; the range
    check of the source (one ``tolist``, invisible here) is counted in the next test."""
    model = Transformer(config()).eval()
    with HostReads() as reads:
        decode(model, source())
    assert reads.seen == []


def test_greedy_decoding_reads_only_the_eos_test_once_per_step():
    model, src = Transformer(config()).eval(), source()
    with HostReads() as reads:
        out = greedy_decode(model, src, 6, BOS, eos_id=EOS)
    assert len(reads.seen) == out.shape[1]  # bool(finished.all()) after every generated token


@pytest.mark.parametrize("mask", [
    torch.tensor([[True] * 5, [True, True, False, False, False], [False] * 5])[:, None, None, :],  # a fully masked row
    tfmini.causal_mask(5),
], ids=["padding", "causal"])
def test_fused_attention_with_a_mask_never_reads_a_value_on_the_host(mask):
    mha = MultiHeadAttention(16, 2)
    x = torch.randn(3, 5, 16, requires_grad=True)
    with HostReads() as reads:
        out, _ = mha(x, x, x, attn_mask=mask)
        out.sum().backward()
    assert reads.seen == []
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("kind", ["transformer", "lm", "mlm"])
def test_models_check_the_id_range_once_per_call(kind, monkeypatch):
    """The range check (``torch.aminmax`` and one ``tolist``) runs once per input at the entry point,
    not again inside the embeddings, and never in ``decode_next``."""
    calls = []
    aminmax = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda x, *a, **k: calls.append(tuple(x.shape)) or aminmax(x, *a, **k))
    src = source()
    with torch.no_grad():
        if kind == "transformer":
            model = Transformer(config()).eval()
            model(src, src)
            assert calls == [(3, 6), (3, 6)]  # src and tgt
            calls.clear()
            greedy_decode(model, src, 8, BOS)
        elif kind == "lm":
            model = DecoderOnlyLM(config()).eval()
            model(src)
            assert calls == [(3, 6)]
            calls.clear()
            sample(model, src, 8, generator=torch.Generator().manual_seed(0))
        else:
            model = EncoderOnlyLM(config()).eval()
            model(src)
            assert calls == [(3, 6)]
            calls.clear()
            masked_lm_loss(model, src, mask_id=4, generator=torch.Generator().manual_seed(0))
    assert calls == [(3, 6)]  # the source / prompt / corrupted batch, once


def test_check_token_ids_check_range_false_skips_only_the_range():
    check_token_ids(torch.tensor([[0, 99]]), 10, check_range=False)
    with pytest.raises(ValueError, match=r"ids: expected ids in \[0, 9\] \(vocab_size=10\), got values in \[0, 99\]"):
        check_token_ids(torch.tensor([[0, 99]]), 10)
    with pytest.raises(ValueError, match=r"ids: expected an integer dtype, got torch\.float32"):
        check_token_ids(torch.tensor([[0.0, 1.0]]), 10, check_range=False)
    with pytest.raises(ValueError, match=r"ids: expected token ids of shape \(B, T\), got \(2,\)"):
        check_token_ids(torch.tensor([0, 1]), 10, check_range=False)
    emb = TokenEmbedding(10, 4)
    with pytest.raises(ValueError, match=r"tgt: expected ids in \[0, 9\]"):
        emb(torch.tensor([[10]]), "tgt")
    with pytest.raises(IndexError):  # unchecked: nn.Embedding's own error
        emb(torch.tensor([[10]]), "tgt", check_range=False)


@pytest.mark.parametrize("make", [lambda: Transformer(config()), lambda: AttentionSeq2SeqRNN(V, V, d_emb=8, d_hidden=16)],
                         ids=["transformer", "rnn"])
@pytest.mark.parametrize("bos", [V, -1])
def test_decoding_rejects_a_bos_id_outside_the_vocabulary(make, bos):
    with pytest.raises(ValueError, match=rf"bos_id: expected an id in \[0, {V - 1}\] \(the target vocabulary\), got {bos}"):
        greedy_decode(make().eval(), source(), 5, bos)


# --------------------------------------------------------------------------------------------- generators

def test_mask_tokens_with_cpu_ids_draws_as_before():
    """Pinned: the draws of the implementation that drew directly on the ids' device."""
    ids = torch.arange(5, 21).reshape(2, 8)
    inputs, labels = mask_tokens(ids, 4, 30, mask_prob=0.5, replace_prob=0.5, random_prob=0.25,
                                 generator=torch.Generator().manual_seed(0))
    assert inputs.tolist() == [[5, 6, 4, 4, 27, 10, 4, 12], [13, 14, 15, 16, 4, 4, 4, 20]]
    I = IGNORE_INDEX
    assert labels.tolist() == [[I, I, 7, 8, 9, I, 11, I], [I, I, 15, I, 17, 18, 19, I]]
    torch.manual_seed(0)  # no generator: the default generator of the ids' device, as before
    assert torch.equal(mask_tokens(ids, 4, 30, mask_prob=0.5, replace_prob=0.5, random_prob=0.25)[0], inputs)


def test_mask_tokens_draws_on_the_generator_device():
    """Ids on another device than the generator (here ``meta``, which holds no data): the numbers are
    drawn by the generator on its own device, exactly as for CPU ids, and the results land on the ids'
    device. Drawing directly on the ids' device would leave a CPU generator untouched."""
    ids = torch.randint(5, 30, (4, 16), generator=torch.Generator().manual_seed(1))
    on_cpu, on_meta = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    before = on_meta.get_state()
    cpu_inputs, _ = mask_tokens(ids, 4, 30, generator=on_cpu)
    inputs, labels = mask_tokens(ids.to("meta"), 4, 30, generator=on_meta)
    assert inputs.device.type == "meta" and labels.device.type == "meta" and inputs.shape == ids.shape
    assert not torch.equal(on_meta.get_state(), before)
    assert torch.equal(on_meta.get_state(), on_cpu.get_state())  # the same draws were made
    assert cpu_inputs.device.type == "cpu"


def test_sample_draws_on_the_generator_device(monkeypatch):
    """The probabilities go to the generator's device and the tokens come back to the model's.
    A CPU-only machine has one real device, so the generator (on ``meta``) and ``torch.multinomial``
    are stand-ins that record what they are given."""
    seen = []

    def multinomial(probs, n, generator=None):
        seen.append((probs.device.type, generator))
        return torch.zeros(probs.shape[0], n, dtype=torch.long)  # token 0, on the CPU

    monkeypatch.setattr(torch, "multinomial", multinomial)
    fake = types.SimpleNamespace(device=torch.device("meta"))
    out = sample(Transformer(config()).eval(), source(), 3, bos_id=BOS, generator=fake)
    assert seen == [("meta", fake)] * 3 and out.device.type == "cpu" and out.shape == (3, 3)
    seen.clear()
    sample(Transformer(config()).eval(), source(), 2, bos_id=BOS)
    assert seen == [("cpu", None)] * 2  # no generator: the model's device


def test_sample_with_a_generator_is_reproducible_and_equals_the_global_stream():
    model, src = Transformer(config()).eval(), source()
    a = sample(model, src, 8, bos_id=BOS, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(3)
    b = sample(model, src, 8, bos_id=BOS)
    assert torch.equal(a, b)
