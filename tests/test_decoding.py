"""tfmini.decoding: greedy search, sampling and beam search, with and without the KV cache.

- cached decoding equals uncached decoding token for token, and the cached step's logits equal the
  full forward's logits at that position (Transformer and DecoderOnlyLM, post-/pre-LN, both positionals);
- beam search with ``beam_size=1`` is greedy decoding; with a larger beam it never finds a less
  probable sequence than greedy (log-probability by teacher forcing), and with a beam as large as the
  search space it finds the most probable sequence;
- EOS/padding handling, ``select_batch`` on nested states and argument validation.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from tfmini import (AttentionSeq2SeqRNN, DecoderOnlyLM, Seq2SeqRNN, Transformer, TransformerConfig, beam_search, generate,
                    greedy_decode, sample, select_batch)

V, BOS, EOS, PAD = 11, 1, 2, 0
CONFIGS = list(itertools.product([False, True], ["sinusoidal", "learned"]))
CONFIG_IDS = [f"{'preLN' if nf else 'postLN'}-{pos}" for nf, pos in CONFIGS]


def tiny_config(norm_first=False, positional="sinusoidal", **kw):
    base = dict(vocab_size=V, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32,
                dropout=0.1, max_len=40, norm_first=norm_first, positional=positional)
    base.update(kw)
    return TransformerConfig(**base)


def make(kind, norm_first=False, positional="sinusoidal"):
    """A tiny model in eval mode and its decoding inputs (source or prompt)."""
    if kind == "transformer":
        model = Transformer(tiny_config(norm_first, positional))
        inputs = torch.randint(3, V, (3, 6))
        inputs[1, 4:] = PAD
    elif kind == "lm":
        model = DecoderOnlyLM(tiny_config(norm_first, positional))
        inputs = torch.randint(3, V, (3, 4))
    elif kind == "attn_rnn":
        model = AttentionSeq2SeqRNN(V, V, d_emb=8, d_hidden=12)
        inputs = torch.randint(3, V, (3, 6))
        inputs[2, 3:] = PAD
    else:
        model = Seq2SeqRNN(V, V, d_emb=8, d_hidden=12)
        inputs = torch.randint(3, V, (3, 6))
    with torch.no_grad():  # larger logits than at initialisation, so that decoding is not flat
        for p in model.parameters():
            p.mul_(1.5)
    return model.eval(), inputs


def full_logits(model, inputs, ys):
    """Logits (B, t, V) of teacher forcing on the decoder input ``ys`` (with BOS, or the prompt)."""
    return model(ys) if isinstance(model, DecoderOnlyLM) else model(inputs, ys)


def log_prob(model, inputs, generated, eos_id=None):
    """Teacher-forced log-probability of ``generated (B, L)``, counting tokens up to and including the first EOS."""
    B = inputs.shape[0]
    start = inputs if isinstance(model, DecoderOnlyLM) else torch.full((B, 1), BOS, dtype=torch.long)
    ys = torch.cat([start, generated], dim=1)
    with torch.no_grad():
        logp = F.log_softmax(full_logits(model, inputs, ys[:, :-1]).double(), -1)[:, start.shape[1] - 1:]
    token_logp = logp.gather(-1, generated[..., None])[..., 0]  # (B, L)
    counted = torch.ones_like(generated, dtype=torch.bool)
    if eos_id is not None:
        seen_eos = (generated == eos_id).long().cumsum(1)
        counted = (seen_eos == 0) | ((seen_eos == 1) & (generated == eos_id))
    return (token_logp * counted).sum(1)


# --------------------------------------------------------------------------------------------- cache

@pytest.mark.parametrize("norm_first, positional", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_cached_step_logits_equal_full_forward(kind, norm_first, positional):
    model, inputs = make(kind, norm_first, positional)
    state = model.start_decoding(inputs)
    ys = inputs if kind == "lm" else torch.full((3, 1), BOS, dtype=torch.long)
    with torch.no_grad():
        for _ in range(8):
            cached = model.decode_next(ys, state, use_cache=True)
            assert cached.shape == (3, V)
            assert_close(cached, full_logits(model, inputs, ys)[:, -1], rtol=1e-5, atol=1e-5)
            assert_close(cached, model.decode_next(ys, model.start_decoding(inputs), use_cache=False), rtol=1e-5, atol=1e-5)
            ys = torch.cat([ys, cached.argmax(-1, keepdim=True)], dim=1)
    assert [layer["k"].shape[2] for layer in state["cache"]] == [ys.shape[1] - 1] * 2


@pytest.mark.parametrize("norm_first, positional", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("kind", ["transformer", "lm"])
@pytest.mark.parametrize("eos_id", [None, EOS])
def test_cached_greedy_equals_uncached(kind, norm_first, positional, eos_id):
    model, inputs = make(kind, norm_first, positional)
    a = greedy_decode(model, inputs, 12, BOS, eos_id, PAD, use_cache=True)
    b = greedy_decode(model, inputs, 12, BOS, eos_id, PAD, use_cache=False)
    assert torch.equal(a, b)
    assert a.shape[0] == 3 and a.shape[1] <= 12
    if eos_id is None:
        assert a.shape[1] == 12


@pytest.mark.parametrize("norm_first, positional", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_cached_sampling_equals_uncached(kind, norm_first, positional):
    model, inputs = make(kind, norm_first, positional)
    runs = [sample(model, inputs, 12, temperature=1.3, bos_id=BOS, eos_id=EOS, pad_id=PAD,
                   generator=torch.Generator().manual_seed(7), use_cache=cache) for cache in (True, False)]
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("norm_first, positional", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_cached_beam_search_equals_uncached(kind, norm_first, positional):
    model, inputs = make(kind, norm_first, positional)
    a = beam_search(model, inputs, 10, beam_size=3, bos_id=BOS, eos_id=EOS, pad_id=PAD, use_cache=True)
    b = beam_search(model, inputs, 10, beam_size=3, bos_id=BOS, eos_id=EOS, pad_id=PAD, use_cache=False)
    assert torch.equal(a, b)


def test_decoding_does_not_change_the_model_or_the_inputs():
    model, inputs = make("transformer")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    src = inputs.clone()
    beam_search(model, inputs, 6, beam_size=3, bos_id=BOS)
    greedy_decode(model, inputs, 6, BOS)
    assert torch.equal(inputs, src)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# --------------------------------------------------------------------------------------------- greedy and sampling

@pytest.mark.parametrize("kind", ["transformer", "lm", "attn_rnn", "rnn"])
def test_greedy_takes_the_argmax_of_teacher_forcing(kind):
    model, inputs = make(kind)
    out = greedy_decode(model, inputs, 7, BOS)
    start = inputs if kind == "lm" else torch.full((3, 1), BOS, dtype=torch.long)
    ys = torch.cat([start, out], dim=1)
    with torch.no_grad():
        logits = full_logits(model, inputs, ys[:, :-1])[:, start.shape[1] - 1:]
    assert torch.equal(logits.argmax(-1), out)


def test_eos_stops_and_pads(copy_oracle):
    model = copy_oracle(V, eos_id=EOS, pad_id=PAD)
    src = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [3, 4, 0, 0]])
    expected = torch.tensor([[5, 6, 7, EOS], [8, EOS, PAD, PAD], [3, 4, EOS, PAD]])
    assert torch.equal(greedy_decode(model, src, 20, BOS, EOS, PAD), expected)  # stops when all finished
    beam = beam_search(model, src, 20, 3, BOS, EOS, PAD)
    # The other beams may run on for a step or two after the best one finished: only padding follows.
    assert torch.equal(beam[:, :4], expected) and (beam[:, 4:] == PAD).all() and beam.shape[1] <= 6
    assert torch.equal(sample(model, src, 20, temperature=0.05, bos_id=BOS, eos_id=EOS, pad_id=PAD), expected)
    assert torch.equal(greedy_decode(model, src, 2, BOS, EOS, PAD), expected[:, :2])  # max_len honoured
    # Without EOS, decoding runs to max_len and keeps predicting.
    assert greedy_decode(model, src, 6, BOS, None, PAD).shape == (3, 6)


def test_decoder_only_output_excludes_the_prompt():
    model, prompt = make("lm")
    out = greedy_decode(model, prompt, 5)
    assert out.shape == (3, 5)
    with torch.no_grad():
        assert torch.equal(out[:, 0], model(prompt)[:, -1].argmax(-1))


@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_sampling_is_reproducible_with_a_generator(kind):
    model, inputs = make(kind)
    draw = lambda seed: sample(model, inputs, 15, temperature=2.0, bos_id=BOS,  # noqa: E731
                               generator=torch.Generator().manual_seed(seed))
    assert torch.equal(draw(3), draw(3))
    assert not torch.equal(draw(3), draw(4))


@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_sampling_limits(kind):
    model, inputs = make(kind)
    greedy = greedy_decode(model, inputs, 8, BOS)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(sample(model, inputs, 8, top_k=1, bos_id=BOS, generator=g), greedy)
    assert torch.equal(sample(model, inputs, 8, temperature=1e-4, bos_id=BOS, generator=g), greedy)


def test_top_k_restricts_the_choices():
    model, inputs = make("lm")
    with torch.no_grad():
        top2 = model(inputs)[:, -1].topk(2, dim=-1).indices  # (B, 2)
    for seed in range(10):
        first = sample(model, inputs, 1, temperature=5.0, top_k=2, generator=torch.Generator().manual_seed(seed))[:, 0]
        assert (first[:, None] == top2).any(-1).all()


# --------------------------------------------------------------------------------------------- beam search

@pytest.mark.parametrize("eos_id", [None, EOS])
@pytest.mark.parametrize("kind, norm_first", [("transformer", False), ("transformer", True), ("lm", False),
                                              ("lm", True), ("attn_rnn", False), ("rnn", False)])
def test_beam_size_one_is_greedy(kind, norm_first, eos_id):
    """Without EOS a beam of one is greedy decoding. With EOS it is greedy's path plus the hypotheses that
    ended on the way (an EOS proposal leaves the beam instead of taking the slot), so it is at least as
    probable as greedy, and equal to it wherever greedy's own ending is the best of them."""
    model, inputs = make(kind, norm_first)
    greedy = greedy_decode(model, inputs, 10, BOS, eos_id, PAD)
    beam = beam_search(model, inputs, 10, beam_size=1, bos_id=BOS, eos_id=eos_id, pad_id=PAD)
    if eos_id is None:
        assert torch.equal(beam, greedy)
    else:
        assert (log_prob(model, inputs, beam, eos_id) >= log_prob(model, inputs, greedy, eos_id) - 1e-6).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("eos_id", [None, EOS])
@pytest.mark.parametrize("kind", ["transformer", "lm", "attn_rnn"])
def test_beam_search_is_at_least_as_probable_as_greedy(kind, eos_id, seed):
    torch.manual_seed(seed)
    model, inputs = make(kind)
    greedy = greedy_decode(model, inputs, 8, BOS, eos_id, PAD)
    beam = beam_search(model, inputs, 8, beam_size=4, bos_id=BOS, eos_id=eos_id, pad_id=PAD)
    lp_greedy, lp_beam = log_prob(model, inputs, greedy, eos_id), log_prob(model, inputs, beam, eos_id)
    assert (lp_beam >= lp_greedy - 1e-5).all(), (lp_beam, lp_greedy)


@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_exhaustive_beam_finds_the_most_probable_sequence(kind):
    """A beam as wide as the search space (V ** (L - 1)) is exact: compare with brute force over all V ** L."""
    L, vocab = 3, 5
    cfg = tiny_config(vocab_size=vocab)
    model = (Transformer(cfg) if kind == "transformer" else DecoderOnlyLM(cfg)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    inputs = torch.randint(1, vocab, (2, 4))
    best = beam_search(model, inputs, L, beam_size=vocab ** (L - 1), bos_id=BOS)
    all_seqs = torch.tensor(list(itertools.product(range(vocab), repeat=L)))  # (V**L, L)
    for b in range(2):
        lp = log_prob(model, inputs[b:b + 1].expand(len(all_seqs), -1), all_seqs)
        assert torch.equal(best[b], all_seqs[lp.argmax()])
        assert log_prob(model, inputs[b:b + 1], best[b:b + 1]).item() == pytest.approx(lp.max().item(), abs=1e-6)


def _best_by_brute_force(model, inputs, vocab, L, eos_id, alpha):
    """The most probable hypothesis under the length penalty, over every sequence that ends with its
    first EOS or has L tokens without one (the search space of beam search with eos_id)."""
    others = [t for t in range(vocab) if t != eos_id]
    full = [list(body) + [eos_id] + [PAD] * (L - n) for n in range(1, L + 1)
            for body in itertools.product(others, repeat=n - 1)]
    full += [list(body) for body in itertools.product(others, repeat=L)]
    seqs = torch.tensor(full)
    lengths = torch.where((seqs == eos_id).any(1), (seqs == eos_id).long().argmax(1) + 1, torch.full((len(seqs),), L))
    best = []
    for b in range(inputs.shape[0]):
        lp = log_prob(model, inputs[b:b + 1].expand(len(seqs), -1), seqs, eos_id)
        penalised = lp / ((5.0 + lengths.double()) / 6.0) ** alpha
        best.append((seqs[penalised.argmax()], penalised.max().item()))
    return best


@pytest.mark.parametrize("alpha", [0.0, 1.0, 3.0])
@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_exhaustive_beam_with_eos_and_length_penalty_is_exact(kind, alpha):
    """With EOS and a length penalty, a beam as wide as the search space finds the best penalised
    hypothesis. Finished hypotheses no longer take beam slots and are ranked by their penalised score
    when they finish, so nothing better is pruned on the way."""
    L, vocab, eos = 3, 5, 2
    torch.manual_seed(1)
    cfg = tiny_config(vocab_size=vocab, dropout=0.0)
    model = (Transformer(cfg) if kind == "transformer" else DecoderOnlyLM(cfg)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    inputs = torch.randint(3, vocab, (3, 4))
    got = beam_search(model, inputs, L, beam_size=vocab ** (L - 1), bos_id=BOS, eos_id=eos, pad_id=PAD,
                      length_penalty=alpha)
    got = F.pad(got, (0, L - got.shape[1]), value=PAD)
    for b, (seq, score) in enumerate(_best_by_brute_force(model, inputs, vocab, L, eos, alpha)):
        n = int((got[b] == eos).long().argmax()) + 1 if (got[b] == eos).any() else L
        mine = log_prob(model, inputs[b:b + 1], got[b:b + 1], eos).item() / ((5.0 + n) / 6.0) ** alpha
        assert mine == pytest.approx(score, abs=1e-5), (b, got[b], seq)


class ToyModel:
    """A next-token table, prefix (after BOS) -> probabilities over 0 pad, 1 BOS, 2 EOS, 3 a, 4 b:
    EOS is the most probable first token, b the least probable but the start of a near-certain
    long sequence. The decoding protocol of tfmini's models, with no network behind it."""

    TABLE = {(): [0, 0, 0.5, 0.3, 0.2], (3,): [0, 0, 0.02, 0.49, 0.49], (4,): [0, 0, 0.005, 0.005, 0.99],
             (4, 4): [0, 0, 0.005, 0.005, 0.99], (4, 4, 4): [0, 0, 0.99, 0.005, 0.005]}

    def start_decoding(self, inputs):
        return {}

    def decode_next(self, ys, state, use_cache=True):
        rows = [self.TABLE.get(tuple(r[1:].tolist()), [0, 0, 0.2, 0.4, 0.4]) for r in ys]
        return torch.tensor(rows, dtype=torch.float64).clamp_min(1e-12).log()


def test_finished_hypotheses_leave_the_beam_and_are_ranked_with_the_length_penalty():
    """With beam size 2, EOS is the best first token and b (third) leads to the best long sequence.
    If the finished hypothesis kept its slot, b would be pruned at once; it is not, and with a length
    penalty that favours length enough, b b b EOS wins (checked against the hand-computed scores)."""
    src = torch.zeros(1, 1, dtype=torch.long)
    out = beam_search(ToyModel(), src, 6, beam_size=2, bos_id=1, eos_id=2, length_penalty=3.0)
    assert out.tolist() == [[4, 4, 4, 2]]
    scores = {"EOS": math.log(0.5) / 1.0, "b b b EOS": math.log(0.2 * 0.99 * 0.99 * 0.99) / (9 / 6) ** 3}
    assert scores["b b b EOS"] > scores["EOS"]
    # without the penalty the single EOS is the most probable hypothesis, and found
    assert beam_search(ToyModel(), src, 6, beam_size=2, bos_id=1, eos_id=2).tolist() == [[2]]


def test_beam_search_length_penalty_prefers_longer_hypotheses():
    model, inputs = make("transformer")
    plain = beam_search(model, inputs, 10, beam_size=4, bos_id=BOS, eos_id=EOS, length_penalty=0.0)
    favoured = beam_search(model, inputs, 10, beam_size=4, bos_id=BOS, eos_id=EOS, length_penalty=2.0)

    def lengths(x):
        eos = (x == EOS).long()
        return torch.where(eos.any(1), eos.argmax(1) + 1, torch.full((x.shape[0],), x.shape[1]))

    assert (lengths(favoured) >= lengths(plain)).all()


class ScriptedLM(torch.nn.Module):
    """A decoder-only model with hand-set next-token probabilities: after the prompt, EOS at once has
    probability 0.5 and "a" 0.4; "a" is followed by "b" and then EOS, each with probability 0.97."""

    decoder_only = True
    A, B = 3, 4
    table = {(): {EOS: 0.5, A: 0.4}, (A,): {B: 0.97}, (A, B): {EOS: 0.97}}

    def start_decoding(self, prompt):
        return {"prompt_len": prompt.shape[1]}

    def decode_next(self, ys, state, use_cache=True):
        rows = []
        for row in ys[:, state["prompt_len"]:].tolist():
            probs = self.table.get(tuple(row), {EOS: 0.97})
            rest = (1.0 - sum(probs.values())) / (8 - len(probs))
            rows.append([probs.get(v, rest) for v in range(8)])
        return torch.tensor(rows).log()


@pytest.mark.parametrize("beam_size", [2, 3])
def test_beam_search_ranks_finished_hypotheses_with_the_length_penalty(beam_size):
    """Raw log-probability: [EOS] (log 0.5) beats [a, b, EOS] (log 0.4 + 2 log 0.97); divided by
    ((5 + L) / 6) ** 2 the longer one wins. Finished hypotheses must not lose score while others run on."""
    model, prompt = ScriptedLM(), torch.tensor([[5, 6], [7, 5]])
    short = beam_search(model, prompt, 6, beam_size=beam_size, eos_id=EOS, pad_id=PAD)
    assert (short[:, 0] == EOS).all() and (short[:, 1:] == PAD).all()
    long = beam_search(model, prompt, 6, beam_size=beam_size, eos_id=EOS, pad_id=PAD, length_penalty=2.0)
    assert long[:, :3].tolist() == [[ScriptedLM.A, ScriptedLM.B, EOS]] * 2 and (long[:, 3:] == PAD).all()
    assert (greedy_decode(model, prompt, 6, eos_id=EOS)[:, 0] == EOS).all()


# --------------------------------------------------------------------------------------------- select_batch

def test_select_batch_on_nested_state():
    state = {
        "memory": torch.arange(12.0).reshape(3, 4),
        "cache": [{"k": torch.arange(3)[:, None, None].expand(3, 2, 5), "v": torch.arange(3.0)}, {}],
        "pair": (torch.tensor([10, 11, 12]), "label"),
        "step": 4,
    }
    index = torch.tensor([2, 2, 0])
    out = select_batch(state, index)
    assert torch.equal(out["memory"], state["memory"][[2, 2, 0]])
    assert torch.equal(out["cache"][0]["k"][:, 0, 0], torch.tensor([2, 2, 0]))
    assert torch.equal(out["cache"][0]["v"], torch.tensor([2.0, 2.0, 0.0]))
    assert out["cache"][1] == {} and isinstance(out["cache"], list)
    assert isinstance(out["pair"], tuple) and torch.equal(out["pair"][0], torch.tensor([12, 12, 10]))
    assert out["pair"][1] == "label" and out["step"] == 4
    assert state["memory"].shape == (3, 4)  # the original is untouched


def test_select_batch_on_a_model_state_reorders_decoding():
    """Decoding from a reordered state gives the reordered logits."""
    model, src = make("transformer")
    state = model.start_decoding(src)
    ys = torch.full((3, 1), BOS, dtype=torch.long)
    with torch.no_grad():
        first = model.decode_next(ys, state)
        ys = torch.cat([ys, first.argmax(-1, keepdim=True)], 1)
        index = torch.tensor([1, 0, 0])
        reordered = select_batch(state, index)
        a = model.decode_next(ys[index], reordered)
        b = model.decode_next(ys, state)
    assert_close(a, b[index], rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------- validation

@pytest.mark.parametrize("call, match", [
    (lambda m, x: greedy_decode(m, x, 0, BOS), r"max_new_tokens: expected an int >= 1, got 0"),
    (lambda m, x: beam_search(m, x, 0, 2, BOS), r"max_new_tokens: expected an int >= 1, got 0"),
    (lambda m, x: sample(m, x, bos_id=BOS), r"max_new_tokens: expected an int >= 1, got None"),
    (lambda m, x: greedy_decode(m, x, 5, BOS, max_len=5), r"max_new_tokens: expected it or its former name max_len, not both"),
    (lambda m, x: beam_search(m, x, 5, 0, BOS), r"beam_size: expected >= 1, got 0"),
    (lambda m, x: sample(m, x, 5, temperature=0.0, bos_id=BOS), r"temperature: expected > 0 .*got 0\.0"),
    (lambda m, x: greedy_decode(m, x, 5), r"bos_id: expected the BOS token id .*got None"),
    (lambda m, x: greedy_decode(m, x[:, :0], 5, BOS), r"inputs: expected non-empty token ids of shape \(B, S\), got \(3, 0\)"),
    (lambda m, x: beam_search(m, x[0], 5, 2, BOS), r"inputs: expected non-empty token ids of shape \(B, S\), got \(6,\)"),
])
def test_decoding_rejects_bad_arguments(call, match):
    model, src = make("transformer")
    with pytest.raises(ValueError, match=match):
        call(model, src)


def test_decoding_rejects_out_of_vocabulary_inputs():
    model, src = make("transformer")
    src[0, 0] = V
    with pytest.raises(ValueError, match=rf"src: expected ids in \[0, {V - 1}\].*got values in \[\d+, {V}\]"):
        greedy_decode(model, src, 5, BOS)
    lm, prompt = make("lm")
    prompt[1, 1] = -1
    with pytest.raises(ValueError, match=r"prompt: expected ids in \[0, 10\].*got values in \[-1, \d+\]"):
        greedy_decode(lm, prompt, 5)


@pytest.mark.parametrize("kind", ["decoder-only", "encoder-decoder"])
def test_decoding_stops_where_the_positions_end(kind):
    """Asking for more tokens than the model has positions stops there, for every strategy, instead of
    failing midway: the prefix read at the last step has exactly max_len positions."""
    import tfmini
    torch.manual_seed(0)
    cfg = tfmini.TransformerConfig(vocab_size=30, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                   dropout=0.0, max_len=8, positional="learned")
    if kind == "decoder-only":
        model, inputs, start, kw = tfmini.DecoderOnlyLM(cfg).eval(), torch.randint(1, 30, (2, 3)), 3, {}
    else:
        model, inputs, start, kw = tfmini.Transformer(cfg).eval(), torch.randint(1, 30, (2, 5)), 1, dict(bos_id=1)
    room = cfg.max_len - start + 1
    for use_cache in (True, False):
        out = tfmini.greedy_decode(model, inputs, 50, use_cache=use_cache, **kw)
        assert out.shape == (2, room)
        assert tfmini.sample(model, inputs, 50, generator=torch.Generator().manual_seed(0), **kw).shape == (2, room)
        assert tfmini.beam_search(model, inputs, 50, beam_size=3, use_cache=use_cache, **kw).shape == (2, room)
    assert torch.equal(tfmini.greedy_decode(model, inputs, 50, **kw)[:, :4], tfmini.greedy_decode(model, inputs, 4, **kw))


# ------------------------------------------------------------ prompts of different lengths in one batch

@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope"])
@pytest.mark.parametrize("eos_id", [None, EOS])
def test_generate_ragged_prompts_equals_each_prompt_alone(use_cache, positional, eos_id):
    """Right-padded prompts of lengths 2, 5 and 3 with their lengths: each row is that prompt continued
    alone (greedy), then pads; the pads' values are never read."""
    torch.manual_seed(0)
    model, _ = make("lm", norm_first=True, positional="learned" if positional == "learned" else "sinusoidal")
    if positional == "rope":
        model = DecoderOnlyLM(tiny_config(True, "rope")).eval()
    lengths = torch.tensor([2, 5, 3])
    prompts = torch.randint(3, V, (3, 5))
    padded = prompts.masked_fill(torch.arange(5)[None] >= lengths[:, None], PAD)
    out = generate(model, padded, 6, eos_id=eos_id, pad_id=PAD, use_cache=use_cache, prompt_lengths=lengths)
    other_pads = generate(model, prompts, 6, eos_id=eos_id, pad_id=PAD, use_cache=use_cache, prompt_lengths=lengths)
    assert torch.equal(out, other_pads)
    for b, n in enumerate(lengths.tolist()):
        alone = generate(model, prompts[b:b + 1, :n], 6, eos_id=eos_id, pad_id=PAD, use_cache=use_cache)[0]
        assert torch.equal(out[b, :len(alone)], alone), (b, out[b], alone)
        assert (out[b, len(alone):] == PAD).all()
    if eos_id is None:
        assert out.shape == (3, 5 + 6)


def test_generate_ragged_prompts_of_equal_length_is_the_plain_batch():
    model, prompts = make("lm")
    assert torch.equal(generate(model, prompts, 5, prompt_lengths=torch.full((3,), prompts.shape[1])),
                       generate(model, prompts, 5))


def test_generate_ragged_sampling_is_reproducible_and_keeps_the_prompts():
    model, _ = make("lm")
    prompts, lengths = torch.randint(3, V, (3, 5)), torch.tensor([5, 1, 3])
    a = generate(model, prompts, 4, do_sample=True, generator=torch.Generator().manual_seed(1), prompt_lengths=lengths)
    b = generate(model, prompts, 4, do_sample=True, generator=torch.Generator().manual_seed(1), prompt_lengths=lengths)
    assert torch.equal(a, b) and a.shape == (3, 5 + 4)
    for row, prompt, n in zip(a, prompts, lengths.tolist()):
        assert torch.equal(row[:n], prompt[:n])        # the prompt, then 4 sampled tokens, then pads
        assert (row[n + 4:] == PAD).all()


@pytest.mark.parametrize("lengths, match", [(torch.tensor([1, 2]), "3 integer lengths"),
                                            (torch.tensor([1.0, 2.0, 3.0]), "integer lengths"),
                                            (torch.tensor([0, 2, 3]), r"lengths in \[1, 4\]"),
                                            (torch.tensor([1, 2, 5]), r"lengths in \[1, 4\]")])
def test_generate_rejects_bad_prompt_lengths(lengths, match):
    model, prompts = make("lm")
    with pytest.raises(ValueError, match="prompt_lengths: expected .*" + match):
        generate(model, prompts, 2, prompt_lengths=lengths)


def test_max_len_is_the_former_name_of_max_new_tokens():
    model, src = make("transformer")
    for fn, kw in ((greedy_decode, {}), (beam_search, {"beam_size": 2}),
                   (sample, {"generator": torch.Generator().manual_seed(0)})):
        new = fn(model, src, max_new_tokens=7, bos_id=BOS, eos_id=EOS, **kw)
        kw = {**kw, "generator": torch.Generator().manual_seed(0)} if fn is sample else kw
        assert torch.equal(fn(model, src, max_len=7, bos_id=BOS, eos_id=EOS, **kw), new)
