"""Chapter 14: chapter 12's small GPT on characters and on byte-level BPE tokens (vocabulary 512),
300 steps each, scored in bits per byte of the validation text.

The chapter asserts, over its seeds 0 to 2, that each BPE input beats the characters by more than 0.2
bits per byte; here each seed is one set of three runs, and the gaps are the metrics.
"""
import math

import torch
import torch.nn.functional as F

import tfmini

BARS = {"gap_bpe64": (">=", 0.2), "gap_bpe32": (">=", 0.2)}
ARMS = {"characters, 64": ("characters", 64), "BPE 512, 64": ("BPE 512", 64), "BPE 512, 32": ("BPE 512", 32)}


def run(seed: int) -> dict:
    text = tfmini.python_source_text()
    train_text, val_text = tfmini.train_val_split(text, val_fraction=0.1)
    bpe = tfmini.BPETokenizer.train(train_text, 512)
    char_vocab = tfmini.Vocab(train_text)
    encoders = {"characters": lambda t: [char_vocab.stoi[c] for c in t], "BPE 512": bpe.encode}
    token_bytes = {"characters": torch.ones(len(char_vocab)), "BPE 512": torch.tensor([float(len(b)) for b in bpe.vocab])}
    vocab_size = {"characters": len(char_vocab), "BPE 512": bpe.vocab_size}
    ids = {name: (torch.tensor(enc(train_text)), torch.tensor(enc(val_text))) for name, enc in encoders.items()}
    bpb = {}
    for arm, (kind, context) in ARMS.items():
        tfmini.set_seed(seed)
        model = tfmini.DecoderOnlyLM(tfmini.TransformerConfig(vocab_size[kind], d_model=64, num_heads=4,
                                                              num_decoder_layers=2, dropout=0.0, max_len=context,
                                                              norm_first=True, positional="learned"))
        windows = tfmini.lm_windows(ids[kind][0], context + 1, stride=context // 2)
        tfmini.fit(model, tfmini.Batches(windows, batch_size=32, seed=seed), steps=300, lr=1e-2, warmup_steps=50,
                   schedule="cosine", pad_id=tfmini.IGNORE_INDEX, seed=seed, progress=False)
        device = next(model.parameters()).device
        val = torch.tensor(tfmini.lm_windows(ids[kind][1], context + 1)).to(device)
        with torch.no_grad():
            nats = sum(F.cross_entropy(model(w[:, :-1]).transpose(1, 2), w[:, 1:], reduction="sum").item()
                       for w in val.split(256))
        bpb[arm] = nats / (math.log(2) * token_bytes[kind].to(device)[val[:, 1:]].sum().item())
    return {"gap_bpe64": bpb["characters, 64"] - bpb["BPE 512, 64"],
            "gap_bpe32": bpb["characters, 64"] - bpb["BPE 512, 32"]}
