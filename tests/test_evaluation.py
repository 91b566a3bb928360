"""tfmini.evaluation's attention measurements: cross-attention weights and a head's score against an alignment."""
from __future__ import annotations

import pytest
import torch

from tfmini import Transformer, TransformerConfig, Vocab, spelled_numbers, spelled_numbers_alignment
from tfmini.evaluation import cross_attention, head_alignment, uniform_weight


def small_task(n=7):
    pairs = spelled_numbers(n, min_numbers=1, max_numbers=3, seed=0)
    src_vocab, tgt_vocab = Vocab.build(s for s, _ in pairs), Vocab.build(t for _, t in pairs)
    cfg = TransformerConfig(len(tgt_vocab), src_vocab_size=len(src_vocab), d_model=16, num_heads=2,
                            num_encoder_layers=1, num_decoder_layers=2, d_ff=32, dropout=0.0, max_len=32)
    torch.manual_seed(0)
    return pairs, src_vocab, tgt_vocab, Transformer(cfg)


def test_cross_attention_is_stacked_rows_of_distributions():
    pairs, src_vocab, tgt_vocab, model = small_task()
    src = torch.tensor([src_vocab.encode(pairs[0][0])])
    tgt = torch.tensor([tgt_vocab.encode(pairs[0][1], bos=True, eos=True)])
    w = cross_attention(model, src, tgt)
    assert w.shape == (2, 1, 2, tgt.shape[1] - 1, src.shape[1])
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))


def test_head_alignment_matches_a_loop_over_pairs():
    pairs, src_vocab, tgt_vocab, model = small_task()
    expected, n = torch.zeros(2, 2), 0
    for s, t in pairs:                               # one pair at a time, no padding
        w = cross_attention(model, torch.tensor([src_vocab.encode(s)]),
                            torch.tensor([tgt_vocab.encode(t, bos=True, eos=True)]))[:, 0]   # (L, H, T, S)
        for i, j in enumerate(spelled_numbers_alignment(s)):
            expected += w[:, :, i, j]
            n += 1
    got = head_alignment(model, pairs, src_vocab, tgt_vocab, spelled_numbers_alignment, batch_size=3)
    assert got.shape == (2, 2)
    torch.testing.assert_close(got, expected / n)


def test_head_alignment_rejects_a_wrong_alignment():
    pairs, src_vocab, tgt_vocab, model = small_task()
    with pytest.raises(ValueError, match="align"):
        head_alignment(model, pairs, src_vocab, tgt_vocab, lambda s: [0])


def test_uniform_weight_averages_over_target_tokens():
    pairs = [(["a", "b"], ["x"]), (["a", "b", "c", "d"], ["x", "y", "z"])]
    assert uniform_weight(pairs) == pytest.approx((1 / 2 + 3 / 4) / 4)
