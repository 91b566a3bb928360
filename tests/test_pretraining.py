"""tfmini.pretraining: the standard library's source as text, contiguous splits, LM windows, BERT-style
masking (statistics, what is scored) and the masked-LM loss, with the errors for bad input."""
from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfmini import (IGNORE_INDEX, PYTHON_SOURCE_MODULES, Batches, DecoderOnlyLM, EncoderOnlyLM, TransformerConfig,
                    Vocab, batch_loss, fit, lm_windows, mask_tokens, masked_lm_loss, python_source_text,
                    train_val_split)

SMALL = ("textwrap", "bisect", "json.decoder")


# --------------------------------------------------------------------------------------------- text

def test_python_source_text_is_deterministic_ascii_and_non_empty():
    text = python_source_text(SMALL)
    assert text == python_source_text(SMALL)
    assert len(text) > 10_000
    assert set(text) <= {"\n"} | {chr(i) for i in range(32, 127)}
    assert "def " in text and "import " in text
    assert text.startswith('"""Text wrapping and filling.')


def test_python_source_text_follows_the_module_order_and_max_chars():
    a, b = python_source_text(["bisect", "textwrap"]), python_source_text(["textwrap", "bisect"])
    assert a != b and sorted(a) == sorted(b)  # same characters, other order
    assert python_source_text(SMALL, max_chars=500) == python_source_text(SMALL)[:500]
    assert len(python_source_text(SMALL, max_chars=1)) == 1


def test_default_modules_all_have_source():
    text = python_source_text()
    assert len(text) > 500_000
    assert len(set(text)) > 90  # nearly all of printable ASCII occurs
    assert len(PYTHON_SOURCE_MODULES) == len(set(PYTHON_SOURCE_MODULES))


@pytest.mark.parametrize("modules, match", [
    ([], r"modules: expected a non-empty sequence of module names, got \[\]"),
    ("textwrap", r"modules: expected a non-empty sequence of module names, got 'textwrap'"),
    (["textwrap", "no_such_module_xyz"], r"modules: expected importable modules with Python source, got 'no_such_module_xyz'"),
    (["sys"], r"modules: expected importable modules with Python source, got 'sys'"),  # built in, no source
])
def test_python_source_text_rejects_bad_modules(modules, match):
    with pytest.raises(ValueError, match=match):
        python_source_text(modules)


@pytest.mark.parametrize("max_chars", [0, -5])
def test_python_source_text_rejects_bad_max_chars(max_chars):
    with pytest.raises(ValueError, match=rf"max_chars: expected None or an int >= 1, got {max_chars}"):
        python_source_text(SMALL, max_chars=max_chars)


# --------------------------------------------------------------------------------------------- split and windows

@pytest.mark.parametrize("n, frac, n_val", [(100, 0.1, 10), (10, 0.5, 5), (7, 0.2, 1)])
def test_train_val_split_is_contiguous(n, frac, n_val):
    seq = list(range(n))
    train, val = train_val_split(seq, frac)
    assert train + val == seq and len(val) == n_val
    text_train, text_val = train_val_split("abcdefghij", 0.3)
    assert (text_train, text_val) == ("abcdefg", "hij")


@pytest.mark.parametrize("seq, frac, match", [
    (list(range(10)), 0.0, r"val_fraction: expected a number in \(0, 1\), got 0.0"),
    (list(range(10)), 1.0, r"val_fraction: expected a number in \(0, 1\), got 1.0"),
    ([1], 0.1, r"seq: expected enough items for two non-empty parts with val_fraction=0.1, got 1"),
    ([1, 2], 0.01, r"seq: expected enough items for two non-empty parts with val_fraction=0.01, got 2"),
])
def test_train_val_split_rejects_bad_input(seq, frac, match):
    with pytest.raises(ValueError, match=match):
        train_val_split(seq, frac)


@pytest.mark.parametrize("n, length, stride", [(20, 5, None), (20, 5, 2), (21, 4, 4), (5, 5, None), (9, 3, 1)])
def test_lm_windows(n, length, stride):
    ids = list(range(100, 100 + n))
    windows = lm_windows(ids, length, stride)
    step = stride or length
    assert len(windows) == (n - length) // step + 1
    for i, w in enumerate(windows):
        assert w == ids[i * step: i * step + length]
    assert lm_windows(torch.tensor(ids), length, stride) == windows


def test_lm_windows_batch_into_a_language_model():
    ids = [4 + i % 7 for i in range(200)]
    batches = Batches(lm_windows(ids, 9, stride=4), batch_size=8, seed=0)
    batch = next(iter(batches))
    assert batch.shape == (8, 9) and batch.dtype == torch.long
    cfg = TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_decoder_layers=1, d_ff=32, dropout=0.0, max_len=8)
    loss = batch_loss(DecoderOnlyLM(cfg), batch)  # predicts 8 next tokens of each window of 9
    assert loss.shape == () and torch.isfinite(loss)


@pytest.mark.parametrize("n, length, stride, match", [
    (10, 1, None, r"length: expected >= 2 \(an input and a next token\), got 1"),
    (10, 4, 0, r"stride: expected >= 1, got 0"),
    (3, 4, None, r"ids: expected at least length=4 ids, got 3"),
])
def test_lm_windows_rejects_bad_input(n, length, stride, match):
    with pytest.raises(ValueError, match=match):
        lm_windows(list(range(n)), length, stride)


# --------------------------------------------------------------------------------------------- masking

V, MASK = 30, 4  # ids 0-3 special, 4 the mask token, 5-29 ordinary


def ordinary_ids(B, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, V, (B, T), generator=g)


@pytest.mark.parametrize("T, mask_prob", [(40, 0.15), (13, 0.15), (3, 0.15), (50, 0.5)])
def test_mask_tokens_chooses_a_fixed_share_of_every_sequence(T, mask_prob):
    ids = ordinary_ids(64, T)
    inputs, labels = mask_tokens(ids, MASK, V, mask_prob=mask_prob, generator=torch.Generator().manual_seed(1))
    chosen = labels != IGNORE_INDEX
    expected = max(1, round(mask_prob * T))
    assert (chosen.sum(dim=1) == expected).all()
    assert torch.equal(labels[chosen], ids[chosen])  # the label is the original token
    assert torch.equal(inputs[~chosen], ids[~chosen])  # everything else is shown as it was
    assert chosen.float().mean(dim=0).std() < 0.2  # no position is systematically preferred


def test_mask_tokens_80_10_10_statistics():
    ids = ordinary_ids(400, 50)
    inputs, labels = mask_tokens(ids, MASK, V, generator=torch.Generator().manual_seed(0))
    chosen = labels != IGNORE_INDEX
    n = int(chosen.sum())
    assert n == 400 * round(0.15 * 50)
    masked = (inputs == MASK) & chosen
    kept = (inputs == ids) & chosen
    swapped = chosen & ~masked & ~kept
    # 3000 chosen positions: binomial standard deviations are below 0.01 for these shares
    assert abs(masked.sum() / n - 0.8) < 0.03
    assert abs(swapped.sum() / n - 0.1 * (1 - 1 / 25)) < 0.025  # a random token may equal the original
    assert abs(kept.sum() / n - (0.1 + 0.1 / 25)) < 0.025
    assert ((inputs[swapped] >= 5) & (inputs[swapped] < V)).all()  # random tokens are ordinary tokens


def test_mask_tokens_never_chooses_special_tokens():
    ids = ordinary_ids(50, 20)
    ids[:, 15:] = 0  # padding
    ids[:, 0] = 1  # BOS
    ids[3] = 0  # a sequence of padding only
    inputs, labels = mask_tokens(ids, MASK, V, replace_prob=0.0, random_prob=1.0,
                                 generator=torch.Generator().manual_seed(0))
    chosen = labels != IGNORE_INDEX
    assert not chosen[:, 15:].any() and not chosen[:, 0].any() and not chosen[3].any()
    assert torch.equal(inputs[:, 15:], ids[:, 15:]) and torch.equal(inputs[:, 0], ids[:, 0])
    assert (chosen.sum(dim=1)[torch.arange(50) != 3] == 2).all()  # round(0.15 * 14) = 2 of the 14 ordinary tokens
    assert ((inputs[chosen] >= 5)).all()  # replacements are never special or the mask token


def test_mask_tokens_simple_variant_and_reproducibility():
    ids = ordinary_ids(8, 30)
    inputs, labels = mask_tokens(ids, MASK, V, replace_prob=1.0, random_prob=0.0)
    chosen = labels != IGNORE_INDEX
    assert (inputs[chosen] == MASK).all() and (inputs[~chosen] == ids[~chosen]).all()
    a = mask_tokens(ids, MASK, V, generator=torch.Generator().manual_seed(5))
    b = mask_tokens(ids, MASK, V, generator=torch.Generator().manual_seed(5))
    c = mask_tokens(ids, MASK, V, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[1], c[1])


@pytest.mark.parametrize("kwargs, match", [
    (dict(mask_id=30), r"mask_id: expected in \[0, 29\] \(vocab_size=30\), got 30"),
    (dict(mask_id=-1), r"mask_id: expected in \[0, 29\] \(vocab_size=30\), got -1"),
    (dict(mask_prob=0.0), r"mask_prob: expected a number in \(0, 1\], got 0.0"),
    (dict(mask_prob=1.5), r"mask_prob: expected a number in \(0, 1\], got 1.5"),
    (dict(replace_prob=0.9, random_prob=0.2), r"replace_prob, random_prob: expected >= 0 with a sum <= 1, got 0.9, 0.2"),
    (dict(random_prob=-0.1), r"replace_prob, random_prob: expected >= 0 with a sum <= 1, got 0.8, -0.1"),
    (dict(vocab_size=5), r"vocab_size: expected ordinary ids to draw random replacements from, got 5"),
])
def test_mask_tokens_rejects_bad_arguments(kwargs, match):
    args = dict(mask_id=MASK, vocab_size=V)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        mask_tokens(ordinary_ids(2, 5).clamp(max=args["vocab_size"] - 1), **args)


@pytest.mark.parametrize("ids, got", [
    (torch.ones(5, dtype=torch.long), r"shape \(5,\) and dtype torch.int64"),
    (torch.ones(2, 5), r"shape \(2, 5\) and dtype torch.float32"),
    ([[5, 6]], r"list"),
])
def test_mask_tokens_rejects_bad_ids(ids, got):
    with pytest.raises(ValueError, match=rf"ids: expected an integer tensor of shape \(B, T\), got {got}"):
        mask_tokens(ids, MASK, V)


# --------------------------------------------------------------------------------------------- the masked-LM loss

class FixedLogits(nn.Module):
    """Logits that are a parameter: the gradient shows exactly which positions the loss reads."""

    def __init__(self, B, T):
        super().__init__()
        self.logits = nn.Parameter(torch.randn(B, T, V))

    def forward(self, ids):
        return self.logits


def test_masked_lm_loss_scores_only_the_chosen_positions():
    ids = ordinary_ids(6, 20)
    model = FixedLogits(6, 20)
    loss = masked_lm_loss(model, ids, mask_id=MASK, vocab_size=V, generator=torch.Generator().manual_seed(3))
    _, labels = mask_tokens(ids, MASK, V, generator=torch.Generator().manual_seed(3))
    chosen = labels != IGNORE_INDEX
    expected = F.cross_entropy(model.logits[chosen], ids[chosen])
    torch.testing.assert_close(loss, expected)
    loss.backward()
    grad_rows = model.logits.grad.abs().sum(dim=-1)  # (B, T)
    assert (grad_rows[~chosen] == 0).all() and (grad_rows[chosen] > 0).all()


def test_masked_lm_loss_feeds_the_corrupted_input_to_the_model():
    seen = []

    class Spy(FixedLogits):
        def forward(self, ids):
            seen.append(ids)
            return self.logits

    ids = ordinary_ids(4, 10)
    masked_lm_loss(Spy(4, 10), ids, mask_id=MASK, vocab_size=V, replace_prob=1.0, random_prob=0.0)
    assert (seen[0] == MASK).sum() == 4 * 2 and torch.equal(seen[0][seen[0] != MASK], ids[seen[0] != MASK])


def test_masked_lm_loss_trains_an_encoder_only_model_with_fit():
    vocab = Vocab("abcdefgh")
    mask_id = len(vocab)  # one id past the ordinary tokens
    cfg = TransformerConfig(vocab_size=len(vocab) + 1, d_model=32, num_heads=2, num_encoder_layers=1, d_ff=64,
                            dropout=0.0, max_len=8)
    seqs = [[vocab.stoi[c]] * 8 for c in "abcdefgh"] * 4  # a hidden letter is any of the letters it can see
    model = EncoderOnlyLM(cfg)
    loss_fn = partial(masked_lm_loss, mask_id=mask_id)  # vocab_size from model.cfg
    before = loss_fn(model, torch.tensor(seqs)).item()
    hist = fit(model, Batches(seqs, 16, seed=0), steps=40, lr=1e-2, progress=False, log_every=10, loss_fn=loss_fn)
    assert before > 1.0 and hist.loss[-1] < 0.2


def test_masked_lm_loss_reads_the_vocab_size_through_a_wrapper():
    class Wrapper(nn.Module):  # like DistributedDataParallel: the model is wrapped, the wrapper has no cfg
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, ids):
            return self.module(ids)

    cfg = TransformerConfig(vocab_size=V, d_model=16, num_heads=2, num_encoder_layers=1, d_ff=32, dropout=0.0, max_len=20)
    model, ids = EncoderOnlyLM(cfg), ordinary_ids(3, 12)
    wrapped = masked_lm_loss(Wrapper(model), ids, mask_id=MASK, generator=torch.Generator().manual_seed(5))
    direct = masked_lm_loss(model, ids, mask_id=MASK, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(wrapped, direct)


def test_masked_lm_loss_needs_a_vocab_size():
    with pytest.raises(ValueError, match=r"vocab_size: expected an int for a model without a cfg.vocab_size, got None"):
        masked_lm_loss(FixedLogits(2, 5), ordinary_ids(2, 5), mask_id=MASK)
