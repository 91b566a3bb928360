"""Chapter 10 (decoding): the cell that trains chapter 9's Transformer for a fixed 600 steps and decodes
the validation pairs greedily, and the cell that decodes them with 4 beams.

Recipe as in the chapter: batches of 32, lr 3e-3, 100 warm-up steps, cosine schedule, 600 steps; the
training pairs are drawn from the seed 10 * seed (0 in the book), the validation pairs are the book's.
"""
import tfmini

BARS = {"greedy_exact": (">=", 0.7), "beam4_minus_greedy": (">=", -0.01)}


def run(seed: int) -> dict:
    train_pairs = tfmini.spelled_numbers(20000, min_numbers=1, max_numbers=12, seed=10 * seed)
    val_pairs = tfmini.spelled_numbers(1000, min_numbers=1, max_numbers=12, seed=2)
    src_vocab = tfmini.Vocab.build(s for s, _ in train_pairs)
    tgt_vocab = tfmini.Vocab.build(t for _, t in train_pairs)
    train_data = tfmini.Batches(tfmini.encode_pairs(train_pairs, src_vocab, tgt_vocab), batch_size=32, seed=seed)
    val_data = tfmini.Batches(tfmini.encode_pairs(val_pairs, src_vocab, tgt_vocab), 500, shuffle=False)
    config = dict(d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, dropout=0.0, max_len=128,
                  norm_first=True)
    tfmini.set_seed(seed)
    model = tfmini.Transformer(tfmini.TransformerConfig(len(tgt_vocab), src_vocab_size=len(src_vocab), **config))
    tfmini.fit(model, train_data, steps=600, lr=3e-3, warmup_steps=100, schedule="cosine", seed=seed, progress=False)
    kw = dict(max_new_tokens=40, bos_id=tgt_vocab.bos_id, eos_id=tgt_vocab.eos_id)
    greedy = tfmini.evaluate(model, val_data, **kw)["seq_acc"]
    beam4 = tfmini.evaluate(model, val_data, beam_size=4, **kw)["seq_acc"]
    return {"greedy_exact": greedy, "beam4_minus_greedy": beam4 - greedy}
