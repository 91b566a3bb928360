"""tfmini.train: learning-rate schedules, loss, the fit loop (reproducible, honours its limits) and accuracy."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfmini import (Batches, DecoderOnlyLM, History, Transformer, TransformerConfig, Vocab, batch_loss, copy_task,
                    default_device, encode_pairs, evaluate, fit, sequence_accuracy, set_seed, token_accuracy,
                    transformer_lr, warmup_schedule)


def copy_setup(n=48, seed=0):
    pairs = copy_task(n, min_len=2, max_len=5, num_symbols=5, seed=seed)
    vocab = Vocab.build(s for s, _ in pairs)
    data = encode_pairs(pairs, vocab, vocab)
    cfg = TransformerConfig(vocab_size=len(vocab), d_model=32, num_heads=2, num_encoder_layers=1,
                            num_decoder_layers=1, d_ff=64, dropout=0.0, max_len=16)
    return cfg, data


def new_model(cfg, seed=0):
    torch.manual_seed(seed)
    return Transformer(cfg)


# --------------------------------------------------------------------------------------------- schedules

@pytest.mark.parametrize("step, d_model, warmup", [(1, 512, 4000), (100, 512, 4000), (4000, 512, 4000),
                                                   (4001, 512, 4000), (100_000, 512, 4000), (50, 64, 10)])
def test_transformer_lr_is_the_papers_formula(step, d_model, warmup):
    expected = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    assert transformer_lr(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)


def test_transformer_lr_known_values():
    assert transformer_lr(4000, 512) == pytest.approx(6.987712429686844e-4, rel=1e-9)  # the peak
    assert transformer_lr(0, 512) == transformer_lr(1, 512)  # steps count from 1
    rates = [transformer_lr(s, 512) for s in range(1, 10_000, 37)]
    peak = max(range(len(rates)), key=rates.__getitem__)
    assert all(a < b for a, b in zip(rates[:peak], rates[1:peak + 1]))
    assert all(a > b for a, b in zip(rates[peak:], rates[peak + 1:]))


def lrs_of(sched, opt, n):
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("warmup", [1, 4, 10])
def test_warmup_schedule_shape(warmup):
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.5)
    lrs = lrs_of(warmup_schedule(opt, warmup), opt, 5 * warmup + 5)
    for s, lr in enumerate(lrs):  # s = number of optimiser steps taken before this one
        if s < warmup:
            assert lr == pytest.approx(0.5 * (s + 1) / warmup)  # linear rise
        else:
            assert lr == pytest.approx(0.5 * math.sqrt(warmup / (s + 1)))  # inverse square root
        # the same shape as the paper's schedule, scaled to peak at the given rate
        assert lr == pytest.approx(0.5 * transformer_lr(s + 1, 64, warmup) / transformer_lr(warmup, 64, warmup))
    assert max(lrs) == pytest.approx(0.5) and lrs.index(max(lrs)) == warmup - 1


def test_warmup_schedule_zero_is_constant_and_negative_is_an_error():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    assert lrs_of(warmup_schedule(opt, 0), opt, 5) == [0.1] * 5
    with pytest.raises(ValueError, match=r"warmup_steps: expected >= 0, got -3"):
        warmup_schedule(opt, -3)


# --------------------------------------------------------------------------------------------- loss

def test_batch_loss_paired_is_masked_next_token_cross_entropy():
    cfg, data = copy_setup(8)
    model = new_model(cfg).eval()
    src, tgt = next(iter(Batches(data, 8, shuffle=False)))
    loss = batch_loss(model, (src, tgt), pad_id=0)
    logits = model(src, tgt[:, :-1])
    gold = tgt[:, 1:]
    real = gold != 0
    expected = F.cross_entropy(logits[real], gold[real])
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)
    smoothed = batch_loss(model, (src, tgt), pad_id=0, label_smoothing=0.1)
    torch.testing.assert_close(smoothed, F.cross_entropy(logits[real], gold[real], label_smoothing=0.1),
                               rtol=1e-6, atol=1e-6)


def test_batch_loss_for_a_language_model():
    cfg = TransformerConfig(vocab_size=9, d_model=16, num_heads=2, num_decoder_layers=1, dropout=0.0)
    model = DecoderOnlyLM(cfg).eval()
    ids = torch.tensor([[1, 4, 5, 6, 2], [1, 7, 2, 0, 0]])
    logits = model(ids[:, :-1])
    gold = ids[:, 1:]
    expected = F.cross_entropy(logits[gold != 0], gold[gold != 0])
    torch.testing.assert_close(batch_loss(model, ids), expected, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------------------------- fit

def test_default_device_and_set_seed():
    assert default_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    set_seed(5)
    a = (torch.rand(3), __import__("random").random(), __import__("numpy").random.rand())
    set_seed(5)
    b = (torch.rand(3), __import__("random").random(), __import__("numpy").random.rand())
    assert torch.equal(a[0], b[0]) and a[1:] == b[1:]


def test_fit_is_reproducible():
    cfg, data = copy_setup()
    runs = []
    for _ in range(2):
        model = new_model(dataclasses.replace(cfg, dropout=0.1))  # dropout draws from the seed too
        hist = fit(model, Batches(data, 8, seed=3), steps=12, lr=3e-3, seed=11, log_every=1, progress=False)
        runs.append((hist.loss, [p.detach().clone() for p in model.parameters()]))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))
    model = new_model(dataclasses.replace(cfg, dropout=0.1))
    other = fit(model, Batches(data, 8, seed=3), steps=12, lr=3e-3, seed=12, log_every=1, progress=False)
    assert other.loss != runs[0][0]


def test_fit_decreases_the_loss_on_a_copy_task():
    cfg, data = copy_setup()
    model = new_model(cfg)
    hist = fit(model, Batches(data, 16, seed=0), steps=60, lr=3e-3, warmup_steps=5, log_every=1, progress=False)
    assert len(hist.loss) == 60
    first, last = sum(hist.loss[:5]) / 5, sum(hist.loss[-5:]) / 5
    assert last < 0.5 * first, (first, last)
    assert not model.training  # fit leaves the model in eval mode


def test_fit_honours_steps_and_logs():
    cfg, data = copy_setup(16)
    hist = fit(new_model(cfg), Batches(data, 4), steps=7, log_every=3, progress=False)
    assert hist.step == [3, 6, 7]  # every log_every steps and the last one
    assert len(hist.loss) == len(hist.lr) == len(hist.time) == 3
    assert hist.time == sorted(hist.time) and hist.seconds == hist.time[-1] > 0
    # steps may span several passes over the data
    hist = fit(new_model(cfg), Batches(data, 4), steps=10, log_every=1, progress=False)
    assert hist.step == list(range(1, 11))


@pytest.mark.parametrize("epochs, batch_size", [(1, 4), (2, 5)])
def test_fit_honours_epochs(epochs, batch_size):
    cfg, data = copy_setup(16)
    batches = Batches(data, batch_size)
    hist = fit(new_model(cfg), batches, epochs=epochs, log_every=1, progress=False)
    assert hist.step[-1] == epochs * len(batches)
    assert batches.epoch == epochs
    # with both, the first limit reached wins
    assert fit(new_model(cfg), Batches(data, 4), epochs=3, steps=5, log_every=1, progress=False).step[-1] == 5


def test_fit_cosine_schedule_with_epochs_spans_every_step():
    cfg, data = copy_setup(16)
    batches = Batches(data, 4)                                 # 4 batches a pass
    hist = fit(new_model(cfg), batches, epochs=3, lr=1e-2, warmup_steps=2, schedule="cosine", log_every=1,
               progress=False)
    assert hist.step[-1] == 12
    # the rate each step used: the peak at the end of the warm-up, then down the cosine to 0 at step 12
    assert hist.lr[0] == pytest.approx(0.5e-2) and hist.lr[1] == pytest.approx(1e-2)
    assert hist.lr[6] == pytest.approx(1e-2 * 0.5 * (1 + math.cos(math.pi * 5 / 10)))
    assert hist.lr[-1] == pytest.approx(0.0, abs=1e-12)


def test_fit_with_epochs_needs_batches_with_a_length():
    cfg, data = copy_setup(16)
    with pytest.raises(ValueError, match="batches: with epochs and no steps, expected batches with a length"):
        fit(new_model(cfg), iter(list(Batches(data, 4))), epochs=1, progress=False)


def test_fit_over_a_used_up_iterator_stops_with_an_error():
    cfg, data = copy_setup(16)
    one_shot = iter(list(Batches(data, 4)))                    # 4 batches, then nothing
    with pytest.raises(ValueError, match="batches: a pass over them gave no batch after 4 steps"):
        fit(new_model(cfg), one_shot, steps=10, progress=False)
    # enough batches for the steps asked: a one-shot iterator is fine
    assert fit(new_model(cfg), iter(list(Batches(data, 4))), steps=3, log_every=1, progress=False).step[-1] == 3


def test_fit_records_the_learning_rate_of_the_warmup():
    cfg, data = copy_setup(16)
    hist = fit(new_model(cfg), Batches(data, 4), steps=8, lr=1e-2, warmup_steps=4, log_every=1, progress=False)
    # step s (1, 2, ...) used the rate of the schedule's index s - 1: the first step a quarter of the peak
    expected = [1e-2 * min(s / 4, math.sqrt(4 / s)) for s in range(1, 9)]
    assert hist.lr == pytest.approx(expected)
    assert hist.lr[0] == pytest.approx(0.25e-2) and hist.lr[3] == pytest.approx(1e-2)


def test_fit_evaluates_and_stops_early():
    cfg, data = copy_setup(16)
    calls = []

    def eval_fn(model):
        calls.append(model.training)
        return {"score": len(calls) / 10}

    hist = fit(new_model(cfg), Batches(data, 4), steps=100, eval_fn=eval_fn, eval_every=3,
               stop_fn=lambda m: m["score"] >= 0.2, progress=False)
    assert [e["step"] for e in hist.evals] == [3, 6]
    assert [e["score"] for e in hist.evals] == [0.1, 0.2]
    assert calls == [False, False]  # evaluated in eval mode
    assert all(e["time"] >= 0 for e in hist.evals)


def test_fit_evaluates_at_the_end():
    cfg, data = copy_setup(16)
    hist = fit(new_model(cfg), Batches(data, 4), steps=5, eval_fn=lambda m: {"x": 1.0}, eval_every=2,
               progress=False)
    assert [e["step"] for e in hist.evals] == [2, 4, 5]


def test_fit_honours_the_time_limit():
    cfg, data = copy_setup(16)
    hist = fit(new_model(cfg), Batches(data, 4), steps=10_000, time_limit=0.0, log_every=1, progress=False)
    assert hist.step == [1]
    hist = fit(new_model(cfg), Batches(data, 4), steps=10_000, time_limit=0.3, log_every=1, progress=False)
    assert 1 <= hist.step[-1] < 10_000 and hist.time[-1] >= 0.3


def first_step_change(cfg, data, **kw):
    model = new_model(cfg)
    before = [p.detach().clone() for p in model.parameters()]
    hist = fit(model, Batches(data, 8, shuffle=False), steps=1, lr=1e-2, log_every=1, progress=False, device="cpu",
               **kw)  # on the CPU, where `before` is, also on a machine with a GPU
    change = sum((p.detach() - b).abs().sum().item() for p, b in zip(model.parameters(), before))
    return change, hist.loss[0]


def test_fit_clips_gradients_and_smooths_labels():
    cfg, data = copy_setup(8)
    free, loss = first_step_change(cfg, data, clip_norm=None)
    clipped, clipped_loss = first_step_change(cfg, data, clip_norm=1e-10)  # gradients far below Adam's eps
    assert clipped < 0.1 * free and clipped_loss == loss
    _, smoothed_loss = first_step_change(cfg, data, label_smoothing=0.2)
    assert smoothed_loss != pytest.approx(loss, rel=1e-3)


def test_fit_requires_steps_or_epochs():
    cfg, data = copy_setup(8)
    with pytest.raises(ValueError, match=r"steps, epochs: expected at least one of them, got neither"):
        fit(new_model(cfg), Batches(data, 4))


def test_fit_progress_outside_a_notebook_goes_to_stderr(capsys):
    cfg, data = copy_setup(8)
    fit(new_model(cfg), Batches(data, 4), steps=2, log_every=1, progress=True)
    captured = capsys.readouterr()
    assert "step 2/2" in captured.err and captured.out == ""


def test_history_defaults():
    h = History()
    assert h.seconds == 0.0 and h.loss == [] and h.evals == []


# --------------------------------------------------------------------------------------------- accuracy

def test_token_and_sequence_accuracy_on_hand_made_tensors():
    target = torch.tensor([[5, 6, 2, 0], [7, 2, 0, 0], [8, 9, 9, 2]])
    perfect = target.clone()
    assert token_accuracy(perfect, target) == 1.0 and sequence_accuracy(perfect, target) == 1.0
    pred = torch.tensor([[5, 6, 2, 0], [7, 3, 0, 0], [8, 9, 1, 2]])
    assert token_accuracy(pred, target) == pytest.approx(7 / 9)
    assert sequence_accuracy(pred, target) == pytest.approx(1 / 3)
    # What the prediction has after the target's padding does not count ...
    noisy_tail = torch.tensor([[5, 6, 2, 4], [7, 2, 9, 9], [8, 9, 9, 2]])
    assert token_accuracy(noisy_tail, target) == 1.0 and sequence_accuracy(noisy_tail, target) == 1.0
    # ... but a missing EOS does.
    assert sequence_accuracy(torch.tensor([[5, 6, 4, 0], [7, 2, 0, 0], [8, 9, 9, 2]]), target) == pytest.approx(2 / 3)


def test_accuracy_with_shorter_or_longer_predictions():
    target = torch.tensor([[5, 6, 2], [7, 2, 0]])
    short = torch.tensor([[5], [7]])  # padded with pad_id: EOS missing
    assert token_accuracy(short, target) == pytest.approx(2 / 5)
    assert sequence_accuracy(short, target) == 0.0
    long = torch.tensor([[5, 6, 2, 0, 0], [7, 2, 0, 0, 0]])
    assert token_accuracy(long, target) == 1.0 and sequence_accuracy(long, target) == 1.0


def test_accuracy_respects_pad_id():
    target = torch.tensor([[5, 6, 9, 9]])
    pred = torch.tensor([[5, 7, 0, 0]])
    assert token_accuracy(pred, target, pad_id=9) == pytest.approx(0.5)
    assert token_accuracy(pred, target, pad_id=0) == pytest.approx(0.25)


def test_accuracy_rejects_batch_mismatch():
    with pytest.raises(ValueError, match=r"pred: expected batch size 2 as in target, got 3"):
        token_accuracy(torch.zeros(3, 4, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))


# --------------------------------------------------------------------------------------------- evaluate

def oracle_batches(n=13, seed=0):
    pairs = copy_task(n, min_len=1, max_len=6, num_symbols=7, seed=seed)
    vocab = Vocab.build(s for s, _ in pairs)
    return len(vocab), Batches(encode_pairs(pairs, vocab, vocab), 4, shuffle=False)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_evaluate_is_perfect_for_a_perfect_model(copy_oracle, beam_size):
    V, batches = oracle_batches()
    model = copy_oracle(V, eos_id=Vocab.eos_id, pad_id=Vocab.pad_id)
    model.train()
    result = evaluate(model, batches, max_len=10, bos_id=Vocab.bos_id, eos_id=Vocab.eos_id, beam_size=beam_size)
    assert result == {"token_acc": 1.0, "seq_acc": 1.0}
    assert model.training  # the mode is restored


def test_evaluate_counts_mistakes(copy_oracle):
    V, batches = oracle_batches()

    class OffByOne(copy_oracle):
        """Right except that it stops one token early on sources longer than 2."""

        def decode_next(self, ys, state, use_cache=True):
            src = state["src"].clone()
            lengths = (src != 0).sum(1)
            longer = lengths > 2
            src[longer, lengths[longer] - 1] = 0
            return super().decode_next(ys, {"src": src}, use_cache)

    result = evaluate(OffByOne(V), batches, max_len=10, bos_id=1, eos_id=2)
    gold_lengths = [int((tgt[i] != 0).sum()) - 1 for _, tgt in batches for i in range(tgt.shape[0])]
    wrong = sum(n > 3 for n in gold_lengths)  # sources longer than 2 (+ EOS)
    assert result["seq_acc"] == pytest.approx(1 - wrong / len(gold_lengths))
    assert 0 < result["token_acc"] < 1


def test_trained_transformer_evaluates_well_on_copy():
    cfg, data = copy_setup(64)
    model = new_model(cfg)
    batches = Batches(data, 16, seed=0)
    hist = fit(model, batches, steps=1000, lr=3e-3, warmup_steps=20, progress=False,  # stops when perfect
               eval_fn=lambda m: evaluate(m, Batches(data, 64, shuffle=False), 8, 1, 2),
               eval_every=50, stop_fn=lambda m: m["seq_acc"] == 1.0)
    final = hist.evals[-1]
    assert final["seq_acc"] == 1.0 and final["token_acc"] == 1.0
    assert final == {**final, **evaluate(model, Batches(data, 64, shuffle=False), 8, 1, 2, beam_size=2)}


def test_fit_uses_a_custom_loss_fn():
    cfg, data = copy_setup()
    model = new_model(cfg)
    seen = []

    def tagger_loss(m, batch):
        seen.append(batch)
        return batch_loss(m, batch) * 0.0 + 7.0 + 0.0 * sum(p.sum() for p in m.parameters())

    hist = fit(model, Batches(data, 8, seed=0), steps=3, log_every=1, progress=False, loss_fn=tagger_loss)
    assert len(seen) == 3 and hist.loss == [7.0, 7.0, 7.0]


def test_fit_or_load_trains_once_then_loads_the_same_model(tmp_path):
    from tfmini import fit_or_load
    cfg, data = copy_setup()
    kwargs = dict(steps=5, lr=3e-3, log_every=1, progress=False)
    first_data, second_data = Batches(data, 8, seed=0), Batches(data, 8, seed=0)
    a = new_model(cfg)
    h1 = fit_or_load(a, first_data, name="copy", cache_dir=tmp_path, **kwargs)
    assert not h1.loaded and len(list(tmp_path.glob("copy-*.pt"))) == 1
    b = new_model(cfg)
    h2 = fit_or_load(b, second_data, name="copy", cache_dir=tmp_path, **kwargs)
    assert h2.loaded and h2.loss == h1.loss and second_data.epoch == first_data.epoch
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    c = new_model(cfg)
    h3 = fit_or_load(c, Batches(data, 8, seed=0), name="copy", cache_dir=tmp_path, **{**kwargs, "lr": 1e-3})
    assert not h3.loaded and len(list(tmp_path.glob("copy-*.pt"))) == 2  # another argument, another run
    with pytest.raises(ValueError, match="eval_fn: expected None with fit_or_load"):
        fit_or_load(c, Batches(data, 8), name="x", cache_dir=tmp_path, steps=1, eval_fn=lambda m: {})


def test_fit_or_load_keys_a_models_settings_not_only_its_weights(tmp_path):
    """Two models with the same modules and weights that compute differently (Seq2SeqRNN with and
    without reverse_source) must not share a checkpoint: the second trains instead of loading the first."""
    from tfmini import Seq2SeqRNN, fit_or_load
    pairs = [([str(i % 7), str(i % 5)], [str(i % 5), str(i % 7)]) for i in range(32)]
    src_vocab, tgt_vocab = Vocab.build(s for s, _ in pairs), Vocab.build(t for _, t in pairs)
    data = encode_pairs(pairs, src_vocab, tgt_vocab)
    models = []
    for reverse in (False, True):
        torch.manual_seed(0)
        models.append(Seq2SeqRNN(len(src_vocab), len(tgt_vocab), d_emb=8, d_hidden=8, reverse_source=reverse))
    assert all(torch.equal(p, q) for p, q in zip(models[0].state_dict().values(), models[1].state_dict().values()))
    kwargs = dict(steps=2, lr=1e-2, progress=False)
    plain = fit_or_load(models[0], Batches(data, 8, seed=0), name="rnn", cache_dir=tmp_path, **kwargs)
    reversed_ = fit_or_load(models[1], Batches(data, 8, seed=0), name="rnn", cache_dir=tmp_path, **kwargs)
    assert not plain.loaded and not reversed_.loaded and len(list(tmp_path.glob("rnn-*.pt"))) == 2


def test_fit_or_load_refuses_data_it_cannot_key(tmp_path):
    """A DataLoader has no examples to key the checkpoint by: two different loaders would share one
    checkpoint, so fit_or_load refuses them instead of returning a model trained on other data."""
    from torch.utils.data import DataLoader

    from tfmini import fit_or_load
    cfg, data = copy_setup()
    loader = DataLoader(list(Batches(data, 8, seed=0)), batch_size=None)
    with pytest.raises(ValueError, match=r"batches: expected tfmini.Batches \(its .examples key the checkpoint\) "
                                         r"with fit_or_load, got DataLoader"):
        fit_or_load(new_model(cfg), loader, name="loader", cache_dir=tmp_path, steps=2, progress=False)
    assert not list(tmp_path.glob("*.pt"))


def test_fit_seeds_each_data_parallel_rank_differently(monkeypatch):
    """Rank r draws its dropout from seed + r: rank 0 trains exactly as a single process, rank 1 differently."""
    import tfmini.train as train_module
    cfg, data = copy_setup(16)
    cfg = TransformerConfig(**{**cfg.__dict__, "dropout": 0.3})
    runs = {}
    for r in (0, 1):
        monkeypatch.setattr(train_module.distributed, "rank", lambda r=r: r)
        torch.manual_seed(0)
        model = new_model(cfg)
        fit(model, Batches(data, 4, seed=0), steps=3, lr=1e-2, seed=0, progress=False)
        runs[r] = model.state_dict()
    monkeypatch.undo()
    torch.manual_seed(0)
    single = new_model(cfg)
    fit(single, Batches(data, 4, seed=0), steps=3, lr=1e-2, seed=0, progress=False)
    assert all(torch.equal(single.state_dict()[k], runs[0][k]) for k in runs[0])
    assert any(not torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def _ranks_gradient(monkeypatch, model, batch, loss_fn, world=2):
    """The gradient DDP would apply (the average over ``world`` simulated ranks of the gradients of
    their scaled losses, from :func:`tfmini.distributed._data_parallel_loss`) and the logged loss.
    ``all_reduce`` sums what the ranks pass to it, call by call: a first pass records it."""
    from tfmini import distributed
    parts = [distributed.shard(batch, r, world) for r in range(world)]
    seen = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda t: seen.append(t.clone()))
    for part in parts:
        distributed._data_parallel_loss(model, part, world, 0, 0.0, loss_fn, (part[0].shape[0], batch[0].shape[0]))
    summed = seen[0] + seen[1]
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda t: t.copy_(summed))
    grads, logged = [], None
    for part in parts:
        model.zero_grad()
        loss, logged = distributed._data_parallel_loss(model, part, world, 0, 0.0, loss_fn,
                                                       (part[0].shape[0], batch[0].shape[0]))
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    return sum(grads) / world, logged


def _gradient(model, loss):
    model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_data_parallel_custom_loss_is_weighted_by_tokens(monkeypatch):
    """A custom loss that returns (mean, count): the ranks' gradients average to the gradient of the
    mean over all the batch's tokens, though the two halves score very different numbers of tokens
    (the mean of the two halves' means would be another loss)."""
    cfg, data = copy_setup(8)
    model = new_model(cfg)
    src, tgt = next(iter(Batches(data, 8, shuffle=False)))
    tgt = tgt.clone()
    tgt[:4, 2:] = cfg.pad_id  # the first half scores few tokens

    def token_loss(m, batch):
        s, t = batch
        logits = m(s, t[:, :-1])
        gold = t[:, 1:]
        return F.cross_entropy(logits.flatten(0, 1), gold.flatten(), ignore_index=cfg.pad_id), (gold != cfg.pad_id).sum()

    whole = _gradient(model, token_loss(model, (src, tgt))[0])
    ddp, logged = _ranks_gradient(monkeypatch, model, (src, tgt), token_loss)
    torch.testing.assert_close(ddp, whole, rtol=1e-5, atol=1e-7)
    assert logged.item() == pytest.approx(token_loss(model, (src, tgt))[0].item(), rel=1e-5)
    halves = [token_loss(model, (src[i:i + 4], tgt[i:i + 4]))[0] for i in (0, 4)]
    naive = _gradient(model, (halves[0] + halves[1]) / 2)
    assert (naive - whole).norm() > 0.05 * whole.norm()  # not vacuous: the mean of means is another loss


def test_data_parallel_custom_mean_loss_is_weighted_by_rows(monkeypatch):
    """A custom loss that returns only its mean, over rows of equal weight: 5 rows on two ranks (3 and 2)
    still give the gradient of the mean over the 5 rows."""
    cfg, data = copy_setup(8)
    model = new_model(cfg)
    src, tgt = next(iter(Batches(data, 5, shuffle=False)))

    def row_loss(m, batch):  # one number per row: its summed token loss; the mean over rows
        s, t = batch
        logits = m(s, t[:, :-1])
        return F.cross_entropy(logits.transpose(1, 2), t[:, 1:], reduction="none").sum(1).mean()

    whole = _gradient(model, row_loss(model, (src, tgt)))
    ddp, _ = _ranks_gradient(monkeypatch, model, (src, tgt), row_loss)
    torch.testing.assert_close(ddp, whole, rtol=1e-5, atol=1e-7)


def test_fit_takes_a_custom_loss_with_its_count():
    cfg, data = copy_setup()
    runs = []
    for pair in (False, True):
        model = new_model(cfg)

        def loss_fn(m, batch, pair=pair):
            loss = batch_loss(m, batch)
            return (loss, 17) if pair else loss

        hist = fit(model, Batches(data, 8, seed=0), steps=3, log_every=1, progress=False, loss_fn=loss_fn)
        runs.append((hist.loss, model.state_dict()))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(runs[0][1][k], runs[1][1][k]) for k in runs[0][1])
    with pytest.raises(ValueError, match=r"loss_fn: expected a scalar loss or a pair \(mean loss, number of scored "
                                         r"tokens\), got a tuple of 3"):
        fit(new_model(cfg), Batches(data, 8, seed=0), steps=1, progress=False,
            loss_fn=lambda m, b: (batch_loss(m, b), 1, 2))


def test_train_and_checkpoint_do_not_import_each_other():
    """tfmini.checkpoint imports tfmini.train; tfmini.train looks fit_or_load up only when asked for it."""
    import ast
    import inspect

    import tfmini.checkpoint
    import tfmini.train
    assert "checkpoint" not in [node.module for node in ast.parse(inspect.getsource(tfmini.train)).body
                                if isinstance(node, ast.ImportFrom)]
    assert tfmini.train.fit_or_load is tfmini.checkpoint.fit_or_load


def test_evaluate_by_length_bins_by_source_length():
    from tfmini import Vocab, evaluate_by_length, reverse_task

    pairs = reverse_task(40, 1, 12, seed=0)
    vocab = Vocab.build(s for s, _ in pairs)
    cfg = TransformerConfig(vocab_size=len(vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                            num_decoder_layers=1, dropout=0.0, max_len=32)
    model = new_model(cfg).eval()
    rows = evaluate_by_length(model, pairs, vocab, vocab, bin_width=5, max_len=14)
    assert [(r["lo"], r["hi"]) for r in rows] == [(1, 5), (6, 10), (11, 15)]
    assert sum(r["n"] for r in rows) == 40
    short = [(s, t) for s, t in pairs if len(s) <= 5]
    expected = evaluate(model, Batches(encode_pairs(short, vocab, vocab), 500, shuffle=False), 14,
                        vocab.bos_id, vocab.eos_id)
    assert rows[0]["n"] == len(short)
    assert rows[0]["seq_acc"] == expected["seq_acc"] and rows[0]["token_acc"] == expected["token_acc"]
    with pytest.raises(ValueError, match="bin_width: expected >= 1, got 0"):
        evaluate_by_length(new_model(cfg), pairs, vocab, vocab, bin_width=0)


def test_warmup_schedule_cosine_decays_to_zero_and_checks_its_arguments():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.5)
    lrs = lrs_of(warmup_schedule(opt, 4, schedule="cosine", total_steps=14), opt, 20)
    assert lrs[:4] == pytest.approx([0.125, 0.25, 0.375, 0.5])  # the same linear warm-up
    assert lrs[8] == pytest.approx(0.25)  # half-way down the cosine: 5 of 10 decay steps
    assert all(a >= b for a, b in zip(lrs[3:], lrs[4:]))  # never rises after the peak
    assert lrs[13:] == pytest.approx([0.0] * 7)  # 0 at total_steps and after
    opt2 = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.5)
    assert lrs_of(warmup_schedule(opt2, 4), opt2, 20) != lrs  # the default is unchanged (inverse sqrt)
    with pytest.raises(ValueError, match=r"total_steps: expected an int > warmup_steps=4"):
        warmup_schedule(opt, 4, schedule="cosine")
    with pytest.raises(ValueError, match=r"schedule: expected 'inverse_sqrt' or 'cosine', got 'linear'"):
        warmup_schedule(opt, 4, schedule="linear")


# ------------------------------------------------------------------------ AdamW's parameter groups

def test_param_groups_decay_matrices_only():
    """Weight decay on the attention/FFN matrices; none on norms, biases, embeddings or the tied head."""
    from tfmini import param_groups
    model = new_model(TransformerConfig(12, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                        d_ff=32, dropout=0.0, max_len=16))
    decay, rest = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and rest["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decayed and all(n.endswith("weight") and "norm" not in n and "embed" not in n for n in decayed)
    assert all(p.dim() >= 2 for p in decay["params"])
    kept = {names[id(p)] for p in rest["params"]}
    assert any("norm" in n for n in kept) and any(n.endswith("bias") for n in kept) and any("embed" in n for n in kept)
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))   # each once, tied too


def test_fit_decays_matrices_only_and_equals_plain_adamw_without_decay():
    cfg, pairs = copy_setup()
    data = lambda: Batches(pairs, 8, seed=0)  # noqa: E731  (a fresh one per run: each pass reshuffles)
    # weight decay 0: the two groups train exactly like one AdamW over model.parameters()
    a, b = new_model(cfg), new_model(cfg)
    fit(a, data(), steps=6, lr=1e-2, clip_norm=None, progress=False, device="cpu")  # where b trains, bit for bit
    set_seed(0)
    opt = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.0)
    b.train()
    for _, batch in zip(range(6), data()):
        opt.zero_grad()
        batch_loss(b, batch).backward()
        opt.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    # one step with weight decay 0.5 moves the matrices only: norms, biases and embeddings end as without
    c, d = new_model(cfg), new_model(cfg)
    fit(c, data(), steps=1, lr=1e-2, weight_decay=0.5, clip_norm=None, progress=False)
    fit(d, data(), steps=1, lr=1e-2, weight_decay=0.0, clip_norm=None, progress=False)
    with_decay, without = dict(c.named_parameters()), dict(d.named_parameters())
    matrices = [n for n, p in with_decay.items() if p.dim() >= 2 and "embed" not in n]
    assert matrices and all(not torch.equal(with_decay[n], without[n]) for n in matrices)
    assert all(torch.equal(with_decay[n], without[n]) for n in with_decay if n not in matrices)


def test_fit_passes_betas_and_eps():
    cfg, pairs = copy_setup()
    a, b = new_model(cfg), new_model(cfg)
    fit(a, Batches(pairs, 8, seed=0), steps=3, progress=False)
    fit(b, Batches(pairs, 8, seed=0), steps=3, betas=(0.9, 0.98), eps=1e-9, progress=False)
    assert any(not torch.equal(pa, pb) for pa, pb in zip(a.parameters(), b.parameters()))
