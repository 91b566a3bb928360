"""Chapter 2 (Bahdanau attention): the cells that build the data and the two models (``make``), train
them, compare them by source length, decode test example 3, and measure where the attention looks
(``attention_offsets``), and the hidden solution of exercise 2 (the longest test example's alignment).

Recipe as in the chapter: both models 500 steps on batches of 128, lr 5e-3, 50 warm-up steps; the
test set (seed 1) is scored once. The training data is drawn from seed 10 * seed (0 in the book).
"""
from collections import Counter

import torch

import tfmini

BARS = {"worst_bin_gain": (">=", -0.1), "long_gain": (">=", 0.2), "longest_token_gain": (">=", 0.2),
        "tens_on_word": (">=", 0.6), "units_back": (">=", 0.8),
        "longest_on_word": (">=", 0.5)}


def run(seed: int) -> dict:
    train_pairs = tfmini.spelled_numbers(20000, min_numbers=1, max_numbers=12, seed=10 * seed)
    test_pairs = tfmini.spelled_numbers(1000, min_numbers=1, max_numbers=12, seed=1)
    src_vocab = tfmini.Vocab.build(s for s, _ in train_pairs)
    tgt_vocab = tfmini.Vocab.build(t for _, t in train_pairs)
    encoded = tfmini.encode_pairs(train_pairs, src_vocab, tgt_vocab)
    tfmini.set_seed(seed)
    fixed = tfmini.Seq2SeqRNN(len(src_vocab), len(tgt_vocab), d_emb=32, d_hidden=128)
    tfmini.set_seed(seed)
    model = tfmini.AttentionSeq2SeqRNN(len(src_vocab), len(tgt_vocab), d_emb=32, d_hidden=64, d_attn=64)
    results = []
    for m in (fixed, model):
        tfmini.fit(m, tfmini.Batches(encoded, batch_size=128, seed=seed), steps=500, lr=5e-3, warmup_steps=50,
                   seed=seed, progress=False)
        results.append(tfmini.evaluate_by_length(m, test_pairs, src_vocab, tgt_vocab))
    fix, att = results
    long_gap = [a["seq_acc"] - f["seq_acc"] for a, f in zip(att, fix) if a["lo"] > 16]
    device = next(model.parameters()).device
    tensor = lambda ids: torch.tensor([ids], device=device)
    src, tgt = test_pairs[3]
    out = tfmini.greedy_decode(model, tensor(src_vocab.encode(src)), max_len=40, bos_id=tgt_vocab.bos_id,
                               eos_id=tgt_vocab.eos_id)
    gold, written = " ".join(tgt).split(" , "), " ".join(tgt_vocab.decode(out[0])).split(" , ")
    right = sum(p == g for p, g in zip(written, gold)) / len(gold)   # numbers right, k-th against k-th (no bar)
    offsets = {"tens": Counter(), "units": Counter()}
    for src, tgt in test_pairs[:300]:
        with torch.no_grad():
            _, alpha = model(tensor(src_vocab.encode(src)), tensor([tgt_vocab.bos_id] + tgt_vocab.encode(tgt)),
                             need_weights=True)
        argmax, ref = alpha[0, :len(tgt)].argmax(-1).tolist(), tfmini.spelled_numbers_alignment(src)
        for i in range(1, len(ref)):
            if ref[i] < ref[i - 1]:
                offsets["tens"][argmax[i - 1] - ref[i - 1]] += 1
                offsets["units"][argmax[i] - ref[i]] += 1
    n = sum(offsets["tens"].values())
    src, tgt = max(test_pairs, key=lambda p: len(p[0]))
    with torch.no_grad():
        _, alpha = model(tensor(src_vocab.encode(src)), tensor([tgt_vocab.bos_id] + tgt_vocab.encode(tgt)),
                         need_weights=True)
    argmax, ref = alpha[0, :len(tgt)].argmax(-1).tolist(), tfmini.spelled_numbers_alignment(src)
    on_word = [argmax[i] - ref[i] in (0, 1) for i, t in enumerate(tgt) if t.isdigit()]
    return {"worst_bin_gain": min(a["seq_acc"] - f["seq_acc"] for a, f in zip(att, fix)),
            "long_gain": sum(long_gap) / len(long_gap), "longest_token_gain": att[-1]["token_acc"] - fix[-1]["token_acc"],
            "example_numbers_right": right, "tens_on_word": offsets["tens"][0] / n,
            "units_back": (offsets["units"][0] + offsets["units"][1]) / n,
            "longest_on_word": sum(on_word) / len(on_word)}
