"""Chapter 9: the pre-LN Transformer on spelled numbers (the cells that build the data, the model and
train it; the length bins and the cross-attention check of example 3).

Recipe as in the chapter: batches of 32, lr 3e-3, 100 warm-up steps, cosine over at most 1600 steps,
stop when the validation set (seed 2) is 99 % exact, evaluated every 200 steps; test set (seed 1) once.
"""
import torch

import tfmini

BARS = {"test_exact": (">=", 0.985), "longest_bin_exact": (">=", 0.9), "best_head_on_source_word": (">=", 0.2)}
CONFIG = dict(d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, dropout=0.0, max_len=128,
              norm_first=True)


def run(seed: int) -> dict:
    train_pairs = tfmini.spelled_numbers(20000, min_numbers=1, max_numbers=12, seed=0)
    val_pairs = tfmini.spelled_numbers(1000, min_numbers=1, max_numbers=12, seed=2)
    test_pairs = tfmini.spelled_numbers(1000, min_numbers=1, max_numbers=12, seed=1)
    src_vocab = tfmini.Vocab.build(s for s, _ in train_pairs)
    tgt_vocab = tfmini.Vocab.build(t for _, t in train_pairs)
    train_data = tfmini.Batches(tfmini.encode_pairs(train_pairs, src_vocab, tgt_vocab), batch_size=32, seed=seed)
    batches = lambda pairs: tfmini.Batches(tfmini.encode_pairs(pairs, src_vocab, tgt_vocab), 500, shuffle=False)
    val_data, test_data = batches(val_pairs), batches(test_pairs)
    BOS, EOS = tgt_vocab.bos_id, tgt_vocab.eos_id
    tfmini.set_seed(seed)
    model = tfmini.Transformer(tfmini.TransformerConfig(len(tgt_vocab), src_vocab_size=len(src_vocab), **CONFIG))
    history = tfmini.fit(model, train_data, lr=3e-3, warmup_steps=100, schedule="cosine", steps=1600,
                         eval_every=200, seed=seed, progress=False,
                         eval_fn=lambda m: tfmini.evaluate(m, val_data, max_len=40, bos_id=BOS, eos_id=EOS),
                         stop_fn=lambda m: m["seq_acc"] >= 0.99)
    test = tfmini.evaluate(model, test_data, max_len=40, bos_id=BOS, eos_id=EOS)
    rows = tfmini.evaluate_by_length(model, test_pairs, src_vocab, tgt_vocab, bin_width=8)
    device = next(model.parameters()).device
    src, tgt = test_pairs[3]
    with torch.no_grad():
        _, w = model(torch.tensor([src_vocab.encode(src)], device=device),
                     torch.tensor([[BOS] + tgt_vocab.encode(tgt)], device=device), need_weights=True)
    cross, ref = w["cross"][-1][0].cpu(), tfmini.spelled_numbers_alignment(src)
    best = max(sum(float(cross[h, i, ref[i]]) for i in range(len(ref))) / len(ref) for h in range(cross.shape[0]))
    return {"steps": history.evals[-1]["step"], "test_exact": test["seq_acc"],
            "longest_bin_exact": rows[-1]["seq_acc"], "best_head_on_source_word": best}
