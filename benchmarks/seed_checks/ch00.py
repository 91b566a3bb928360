"""Chapter 0 (quick tour): the cells that build the reversal data, the model and train it, the cell
that decodes "3 1 4 1 5 9 2 6", the cell that measures the cross-attention on the copied token, and
the hidden solutions of exercises 1 and 2 (the same recipe on the copy and the sort task).

Recipe as in the chapter: batches of 64, lr 1e-3, 100 warm-up steps, at most 20 epochs, stop when the
validation set is 100 % exact, evaluated every 100 steps; the test set (seed 1) is scored once.
The training and validation data are drawn from the seeds 10 * seed and 10 * seed + 2 (0 and 2 in the book).
"""
import torch

import tfmini

BARS = {"val_exact": (">=", 1.0), "test_exact": (">=", 0.99), "example_right": (">=", 1.0),
        "best_head_weight": (">=", 0.5),
        "copy_val_exact": (">=", 1.0), "copy_test_exact": (">=", 0.98), "copy_diagonal": (">=", 0.5),
        "sort_val_exact": (">=", 0.99), "sort_test_exact": (">=", 0.98), "sort_content": (">=", 0.5)}
EXAMPLE = "3 1 4 1 5 9 2 6".split()


def run(seed: int) -> dict:
    train_pairs = tfmini.reverse_task(4000, min_len=3, max_len=10, seed=10 * seed)
    val_pairs = tfmini.reverse_task(500, min_len=3, max_len=10, seed=10 * seed + 2)
    test_pairs = tfmini.reverse_task(500, min_len=3, max_len=10, seed=1)
    vocab = tfmini.Vocab.build(src for src, _ in train_pairs)
    train_data = tfmini.Batches(tfmini.encode_pairs(train_pairs, vocab, vocab), batch_size=64, seed=seed)
    held_out = lambda pairs: tfmini.Batches(tfmini.encode_pairs(pairs, vocab, vocab), batch_size=250, shuffle=False)
    val_data, test_data = held_out(val_pairs), held_out(test_pairs)
    score = lambda m, data: tfmini.evaluate(m, data, max_len=12, bos_id=vocab.bos_id, eos_id=vocab.eos_id)
    tfmini.set_seed(seed)
    config = tfmini.TransformerConfig(vocab_size=len(vocab), d_model=64, num_heads=4, num_encoder_layers=2,
                                      num_decoder_layers=2, d_ff=128, dropout=0.0, max_len=32)
    model = tfmini.Transformer(config)
    history = tfmini.fit(model, train_data, epochs=20, lr=1e-3, warmup_steps=100, seed=seed, progress=False,
                         eval_fn=lambda m: score(m, val_data), eval_every=100,
                         stop_fn=lambda m: m["seq_acc"] == 1.0)
    test = score(model, test_data)
    device = next(model.parameters()).device
    src = torch.tensor([vocab.encode(EXAMPLE)], device=device)
    out = tfmini.greedy_decode(model, src, max_len=12, bos_id=vocab.bos_id, eos_id=vocab.eos_id)
    prediction = vocab.decode(out[0])
    tgt_in = torch.tensor([[vocab.bos_id] + vocab.encode(prediction)], device=device)
    with torch.no_grad():
        _, weights = model(src, tgt_in, need_weights=True)
    cross = torch.stack([w[0] for w in weights["cross"]]).cpu()  # (layers, heads, T, S)
    n = len(EXAMPLE)
    rows = torch.arange(n)
    per_head = cross[:, :, rows, n - 1 - rows].mean(-1)
    return {"steps": history.evals[-1]["step"], "val_exact": history.evals[-1]["seq_acc"],
            "test_exact": test["seq_acc"], "example_right": float(prediction == EXAMPLE[::-1]),
            "best_head_weight": per_head.max().item(), **other_task(tfmini.copy_task, seed, vocab, config),
            **other_task(tfmini.sort_task, seed, vocab, config)}


def other_task(make, seed, vocab, config):
    """Exercises 1 and 2: the recipe on another task; the best head's weight on the diagonal (copy) or on
    the source positions holding the digit being written (sort)."""
    batches = lambda n, s, b, shuffle: tfmini.Batches(
        tfmini.encode_pairs(make(n, min_len=3, max_len=10, seed=s), vocab, vocab), b, shuffle=shuffle, seed=seed)
    train, val, test = batches(4000, 10 * seed, 64, True), batches(500, 10 * seed + 2, 250, False), batches(500, 1, 250, False)
    tfmini.set_seed(seed)
    m = tfmini.Transformer(config)
    score = lambda data: tfmini.evaluate(m, data, max_len=12, bos_id=vocab.bos_id, eos_id=vocab.eos_id)
    h = tfmini.fit(m, train, epochs=20, lr=1e-3, warmup_steps=100, seed=seed, progress=False,
                   eval_fn=lambda _: score(val), eval_every=100, stop_fn=lambda e: e["seq_acc"] == 1.0)
    device = next(m.parameters()).device
    name = "copy" if make is tfmini.copy_task else "sort"
    per_head = []                                   # on the first validation batch (to choose), the first test batch
    for src, tgt in (next(iter(val)), next(iter(test))):
        with torch.no_grad():
            _, w = m(src.to(device), tgt[:, :-1].to(device), need_weights=True)
        cross, out = torch.stack(w["cross"]).cpu(), tgt[:, 1:]
        T, S = out.shape[1], src.shape[1]
        on = (torch.eye(T, S, dtype=torch.bool).expand(len(src), T, S) if name == "copy"
              else out[:, :, None] == src[:, None, :])
        digits = out >= 4
        per_head.append(((cross * on[None, :, None]).sum(-1) * digits[None, :, None]).sum((1, 3)) / digits.sum())
    chosen = per_head[0].flatten().argmax()
    return {f"{name}_steps": h.evals[-1]["step"], f"{name}_val_exact": h.evals[-1]["seq_acc"],
            f"{name}_test_exact": score(test)["seq_acc"],
            f"{name}_diagonal" if name == "copy" else f"{name}_content": per_head[1].flatten()[chosen].item()}
