"""Chapter 1 (sequence to sequence with RNNs): the cells that build the data and ``make_fixed``, train
the plain and the reversed-source model, train the plain model longer (``val_accuracy``), compare the
models by source length, measure the influence of each input position on the encoder's last state
(``influence``) and the encoder's mean forget gate on the validation sources (``mean_forget_gate``), score
the short test sources that never occur in training on their own, and the hidden solution of exercise 1
(which numbers of a long source get lost, for the longer-trained model and
for the two 500-step models).

Recipe as in the chapter: 500 steps on batches of 128, lr 5e-3, 50 warm-up steps; then the plain model
again from its 500-step weights with the same arguments, checked every 250 steps on the validation set
(seed 2) and stopped once it gets 96 % of the short validation sources (up to 8 tokens) right, at most
1,500 more steps. The test set (seed 1) is scored once, after training. The training data is drawn
from seed 10 * seed (0 in the book).
"""
import torch

import tfmini

SHORT, LONG = 8, 32
SHORT_BAR, CHECK_EVERY, MAX_MORE = 0.96, 250, 1500
BARS = {"short_exact_min": (">=", 0.5), "long_exact_max": ("<=", 0.05), "token_drop_min": (">=", 0.3),
        "decay_untrained": (">=", 100.0), "flattening": (">=", 100.0), "reversal_gain": (">=", 0.1),
        "reversal_long_tok_gain": (">=", 0.02), "forget_gate_rise": (">=", 0.1),
        "longer_val_short": (">=", SHORT_BAR), "longer_val_long_exact": ("<=", 0.05), "longer_val_long_tok_rise": (">=", 0.0),
        "longer_short_exact": (">=", 0.9), "longer_short_gain": (">=", 0.1), "longer_mid_gain": (">=", 0.25),
        "longer_long_exact": ("<=", 0.05), "longer_token_drop": (">=", 0.3),
        "longer_unseen_short": (">=", 0.7), "unseen_short_gain": (">=", 0.15), "seen_minus_unseen": (">=", 0.0),
        "ex1_count_right": (">=", 0.8), "ex1_first_right": (">=", 0.7), "ex1_later_right": ("<=", 0.15),
        "ex1_reversal_first_gain": (">=", 0.0)}


def influence(encoder, S=40, batch=16):
    x = torch.randn(batch, S, encoder.input_size, device=next(encoder.parameters()).device, requires_grad=True)
    with torch.backends.cudnn.flags(enabled=False):  # cuDNN has no LSTM backward in eval mode
        out, _ = encoder(x)
        out[:, -1].pow(2).sum().backward()
    return x.grad.norm(dim=-1).mean(0).cpu()


@torch.no_grad()
def mean_forget_gate(model, src):
    """The encoder's forget gate f_t (PyTorch's gate order i, f, g, o), averaged over real tokens and units."""
    enc, x = model.encoder, model.src_embed(src)
    out, _ = enc(x)
    h_prev = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)
    rows = slice(enc.hidden_size, 2 * enc.hidden_size)
    f = torch.sigmoid(x @ enc.weight_ih_l0[rows].T + enc.bias_ih_l0[rows]
                      + h_prev @ enc.weight_hh_l0[rows].T + enc.bias_hh_l0[rows])
    return f[src != model.pad_id].mean().item()


def numbers_right(model, pairs, src_vocab, tgt_vocab):
    """Exercise 1: per list position, the share of long test sources whose k-th number is right, and the
    share of outputs with the right count of numbers."""
    src, _ = next(iter(tfmini.Batches(tfmini.encode_pairs(pairs, src_vocab, tgt_vocab), len(pairs), shuffle=False)))
    out = tfmini.greedy_decode(model, src.to(next(model.parameters()).device), max_new_tokens=40,
                               bos_id=tgt_vocab.bos_id, eos_id=tgt_vocab.eos_id)
    right, seen, count_right = torch.zeros(12), torch.zeros(12), 0
    for (_, tgt), ids in zip(pairs, out.tolist()):
        gold, pred = " ".join(tgt).split(" , "), " ".join(tgt_vocab.decode(ids)).split(" , ")
        count_right += len(pred) == len(gold)
        for k, number in enumerate(gold):
            seen[k] += 1
            right[k] += k < len(pred) and pred[k] == number
    return right, seen, count_right / len(pairs)


def run(seed: int) -> dict:
    train_pairs = tfmini.spelled_numbers(20000, min_numbers=1, max_numbers=12, seed=10 * seed)
    val_pairs = tfmini.spelled_numbers(1000, min_numbers=1, max_numbers=12, seed=2)
    test_pairs = tfmini.spelled_numbers(1000, min_numbers=1, max_numbers=12, seed=1)
    src_vocab = tfmini.Vocab.build(s for s, _ in train_pairs)
    tgt_vocab = tfmini.Vocab.build(t for _, t in train_pairs)
    train_data = tfmini.Batches(tfmini.encode_pairs(train_pairs, src_vocab, tgt_vocab), batch_size=128, seed=seed)

    def make_fixed(reverse=False):
        tfmini.set_seed(seed)
        return tfmini.Seq2SeqRNN(len(src_vocab), len(tgt_vocab), d_emb=32, d_hidden=128, reverse_source=reverse)

    rows, models = [], []
    for reverse in (False, True):
        model = make_fixed(reverse)
        tfmini.fit(model, train_data, steps=500, lr=5e-3, warmup_steps=50, seed=seed, progress=False)
        rows.append(tfmini.evaluate_by_length(model, test_pairs, src_vocab, tgt_vocab))
        models.append(model)

    encode = lambda pairs: tfmini.Batches(tfmini.encode_pairs(pairs, src_vocab, tgt_vocab), 500, shuffle=False)
    val_short = encode([p for p in val_pairs if len(p[0]) <= SHORT])
    val_long = encode([p for p in val_pairs if len(p[0]) > LONG])

    def val_accuracy(m):
        ids = dict(max_new_tokens=40, bos_id=tgt_vocab.bos_id, eos_id=tgt_vocab.eos_id)
        s, l = tfmini.evaluate(m, val_short, **ids), tfmini.evaluate(m, val_long, **ids)
        return {"short_exact": s["seq_acc"], "long_exact": l["seq_acc"], "long_tokens": l["token_acc"]}

    longer = make_fixed()
    longer.load_state_dict(models[0].state_dict())
    checks = [val_accuracy(longer)]
    more = tfmini.fit(longer, train_data, steps=MAX_MORE, lr=5e-3, warmup_steps=50, seed=seed, progress=False,
                      eval_fn=val_accuracy, eval_every=CHECK_EVERY, stop_fn=lambda r: r["short_exact"] >= SHORT_BAR)
    checks += more.evals
    long_rows = tfmini.evaluate_by_length(longer, test_pairs, src_vocab, tgt_vocab)
    long_pairs = [p for p in test_pairs if len(p[0]) > LONG]
    right, seen, count_right = numbers_right(longer, long_pairs, src_vocab, tgt_vocab)
    right_500, seen_500, _ = numbers_right(models[0], long_pairs, src_vocab, tgt_vocab)
    right_rev, seen_rev, _ = numbers_right(models[1], long_pairs, src_vocab, tgt_vocab)  # it reverses src itself

    in_train = {tuple(s) for s, _ in train_pairs}
    short_test = [p for p in test_pairs if len(p[0]) <= SHORT]
    short_seen, short_unseen = ([p for p in short_test if (tuple(p[0]) in in_train) == flag] for flag in (True, False))
    ids = dict(max_new_tokens=40, bos_id=tgt_vocab.bos_id, eos_id=tgt_vocab.eos_id)
    unseen_500, unseen_longer, seen_longer = (tfmini.evaluate(m, encode(ps), **ids)["seq_acc"]
                                              for m, ps in ((models[0], short_unseen), (longer, short_unseen),
                                                            (longer, short_seen)))

    all_val = tfmini.Batches(tfmini.encode_pairs(val_pairs, src_vocab, tgt_vocab), len(val_pairs), shuffle=False)
    val_src = next(iter(all_val))[0].to(next(models[0].parameters()).device)   # all 1,000, as in the chapter
    f_initial = mean_forget_gate(make_fixed().to(val_src.device), val_src)
    f_trained = mean_forget_gate(models[0], val_src)

    infl_untrained = influence(make_fixed().to(val_src.device).encoder)   # the plain model's initial encoder
    infl_trained = influence(models[0].encoder)
    decay = (infl_untrained[-1] / infl_untrained[0]).item()
    decay_trained = (infl_trained[-1] / infl_trained[0]).item()
    return {"short_exact_min": min(r[0]["seq_acc"] for r in rows), "long_exact_max": max(r[-1]["seq_acc"] for r in rows),
            "token_drop_min": min(r[0]["token_acc"] - r[-1]["token_acc"] for r in rows),
            "reversal_gain": rows[1][0]["seq_acc"] - rows[0][0]["seq_acc"],
            "reversal_long_tok_gain": rows[1][-1]["token_acc"] - rows[0][-1]["token_acc"],
            "forget_gate_rise": f_trained - f_initial,
            "decay_untrained": decay, "flattening": decay / decay_trained,
            "more_steps": more.evals[-1]["step"],
            "longer_val_short": more.evals[-1]["short_exact"], "longer_val_long_exact": max(c["long_exact"] for c in checks),
            "longer_val_long_tok_rise": checks[-1]["long_tokens"] - checks[-2]["long_tokens"],
            "longer_short_exact": long_rows[0]["seq_acc"],
            "longer_short_gain": long_rows[0]["seq_acc"] - rows[0][0]["seq_acc"],
            "longer_mid_gain": long_rows[1]["seq_acc"] - rows[0][1]["seq_acc"],
            "longer_long_exact": long_rows[-1]["seq_acc"],
            "longer_token_drop": long_rows[0]["token_acc"] - long_rows[-1]["token_acc"],
            "longer_unseen_short": unseen_longer, "unseen_short_gain": unseen_longer - unseen_500,
            "seen_minus_unseen": seen_longer - unseen_longer,
            "ex1_count_right": count_right, "ex1_first_right": (right[0] / seen[0]).item(),
            "ex1_later_right": (right[4:].sum() / seen[4:].sum()).item(),
            "ex1_reversal_first_gain": (right_rev[0] / seen_rev[0] - right_500[0] / seen_500[0]).item()}
