"""Chapter 1 (sequence to sequence with RNNs): the cells that build the data and ``make_fixed``, train
the plain and the reversed-source model, compare them by source length, and measure the influence of
each input position on the encoder's last state (``influence``).

Recipe as in the chapter: 500 steps on batches of 128, lr 5e-3, 50 warm-up steps; the test set
(seed 1) is scored once. The training data is drawn from seed 10 * seed (0 in the book).
"""
import torch
from torch import nn

import tfmini

BARS = {"short_exact_min": (">=", 0.5), "long_exact_max": ("<=", 0.05), "token_drop_min": (">=", 0.3),
        "decay_untrained": (">=", 100.0), "flattening": (">=", 100.0)}


def influence(encoder, S=40, batch=16):
    x = torch.randn(batch, S, encoder.input_size, device=next(encoder.parameters()).device, requires_grad=True)
    with torch.backends.cudnn.flags(enabled=False):  # cuDNN has no LSTM backward in eval mode
        out, _ = encoder(x)
        out[:, -1].pow(2).sum().backward()
    return x.grad.norm(dim=-1).mean(0).cpu()


def run(seed: int) -> dict:
    train_pairs = tfmini.spelled_numbers(20000, min_numbers=1, max_numbers=12, seed=10 * seed)
    test_pairs = tfmini.spelled_numbers(1000, min_numbers=1, max_numbers=12, seed=1)
    src_vocab = tfmini.Vocab.build(s for s, _ in train_pairs)
    tgt_vocab = tfmini.Vocab.build(t for _, t in train_pairs)
    train_data = tfmini.Batches(tfmini.encode_pairs(train_pairs, src_vocab, tgt_vocab), batch_size=128, seed=seed)
    rows, models = [], []
    for reverse in (False, True):
        tfmini.set_seed(seed)
        model = tfmini.Seq2SeqRNN(len(src_vocab), len(tgt_vocab), d_emb=32, d_hidden=128, reverse_source=reverse)
        tfmini.fit(model, train_data, steps=500, lr=5e-3, warmup_steps=50, seed=seed, progress=False)
        rows.append(tfmini.evaluate_by_length(model, test_pairs, src_vocab, tgt_vocab))
        models.append(model)
    torch.manual_seed(seed)
    infl_untrained = influence(nn.LSTM(32, 128, batch_first=True))
    infl_trained = influence(models[0].encoder)
    decay = (infl_untrained[-1] / infl_untrained[0]).item()
    decay_trained = (infl_trained[-1] / infl_trained[0]).item()
    return {"short_exact_min": min(r[0]["seq_acc"] for r in rows), "long_exact_max": max(r[-1]["seq_acc"] for r in rows),
            "token_drop_min": min(r[0]["token_acc"] - r[-1]["token_acc"] for r in rows),
            "decay_untrained": decay, "flattening": decay / decay_trained}
