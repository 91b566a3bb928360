"""Chapter 14: the modern decoder's two trained measurements, with every seed varied together.

1. Length extrapolation: chapter 6's task (label every token with the one before it) in a causal
   decoder, trained 300 steps on 4 to 16 tokens with RoPE, sinusoidal and learned positions; accuracy
   on positions 16 to 31 of validation sequences of 32 tokens, and on whole sequences of 16.
2. Chapter 12's text as characters: the GPT (learned positions, LayerNorm, GELU) against the Llama-style
   decoder with G = 8 and G = 2 key/value heads, 250 steps each; validation loss in nats per character
   on every second validation window.

The chapter asserts, over its seeds 0 to 2, that every encoding reaches 90 % at length 16, that RoPE
labels at least 60 % of the new positions and the other two at most 20 %, and that the Llama-style
models (G = 8 and G = 2) end at least 0.02 nats below the GPT trained with the same seed; here each
seed is one set of runs, and the gaps are the metrics.
"""
import torch
import torch.nn.functional as F

import tfmini

BARS = {"rope_beyond": (">=", 0.6), "sinusoidal_beyond": ("<=", 0.2), "learned_beyond": ("<=", 0.2),
        "worst_at_16": (">=", 0.9), "gap_g2": (">=", 0.02), "gap_g8": (">=", 0.02)}

PAD, FIRST, V_SHIFT, L_TRAIN, L_LONG = 0, 1, 12, 16, 32
SHIFT_MODEL = dict(d_model=32, num_heads=2, num_decoder_layers=2, d_ff=64, dropout=0.0, norm_first=True,
                   activation="gelu")
CONTEXT, BATCH, STEPS = 32, 16, 250
GPT = dict(d_model=64, num_heads=8, num_decoder_layers=2, dropout=0.0, norm_first=True, positional="learned",
           activation="gelu")
LLAMA = dict(d_model=64, num_heads=8, num_kv_heads=2, num_decoder_layers=2, d_ff=195, dropout=0.0, norm_first=True,
             norm="rmsnorm", positional="rope", activation="swiglu", attention_bias=False, ffn_bias=False,
             embed_scale=False, tie_weights=False)


def shift_sequences(n, min_len, max_len, seed):
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for L in torch.randint(min_len, max_len + 1, (n,), generator=g).tolist():
        x = torch.randint(2, V_SHIFT, (L,), generator=g)
        pairs.append((x.tolist(), [FIRST] + x[:-1].tolist()))
    return pairs


def tagging_loss(model, batch):
    x, labels = batch
    return F.cross_entropy(model(x).transpose(1, 2), labels, ignore_index=PAD)


@torch.no_grad()
def accuracy_by_position(model, L):
    device = next(model.parameters()).device
    x, labels = (torch.tensor(t, device=device) for t in zip(*shift_sequences(200, L, L, seed=10_000 + L)))
    return (model(x).argmax(-1) == labels).float().mean(0).cpu()


def extrapolation(seed):
    out = {}
    for kind in ("rope", "sinusoidal", "learned"):
        tfmini.set_seed(seed)
        model = tfmini.DecoderOnlyLM(tfmini.TransformerConfig(V_SHIFT, max_len=L_LONG, positional=kind, **SHIFT_MODEL))
        data = tfmini.Batches(shift_sequences(4000, 4, L_TRAIN, seed), batch_size=64, seed=seed)
        tfmini.fit(model, data, steps=300, lr=6e-3, warmup_steps=30, schedule="cosine", loss_fn=tagging_loss,
                   seed=seed, progress=False)
        out[f"{kind}_beyond"] = accuracy_by_position(model, L_LONG)[L_TRAIN:].mean().item()
        out[f"{kind}_at_16"] = accuracy_by_position(model, L_TRAIN).mean().item()
    return out


def language_models(seed):
    text = tfmini.python_source_text()
    vocab = tfmini.Vocab(text)
    ids = torch.tensor([vocab.stoi[c] for c in text])
    train_ids, val_ids = tfmini.train_val_split(ids, val_fraction=0.1)
    train_windows = tfmini.lm_windows(train_ids, CONTEXT + 1, stride=CONTEXT // 2)
    val_windows = torch.tensor(tfmini.lm_windows(val_ids, CONTEXT + 1))[::2]
    arms = {"gpt": GPT, "g8": {**LLAMA, "num_kv_heads": 8}, "g2": LLAMA}
    loss = {}
    for arm, options in arms.items():
        tfmini.set_seed(seed)
        model = tfmini.DecoderOnlyLM(tfmini.TransformerConfig(len(vocab), max_len=CONTEXT, **options))
        tfmini.fit(model, tfmini.Batches(train_windows, batch_size=BATCH, seed=seed), steps=STEPS, lr=1e-2,
                   warmup_steps=30, schedule="cosine", seed=seed, progress=False)
        device = next(model.parameters()).device
        with torch.no_grad():
            total = sum(F.cross_entropy(model(w[:, :-1]).transpose(1, 2), w[:, 1:], reduction="sum").item()
                        for w in val_windows.to(device).split(512))
        loss[arm] = total / (val_windows.shape[0] * CONTEXT)
    return {"gap_g2": loss["gpt"] - loss["g2"], "gap_g8": loss["gpt"] - loss["g8"]}


def run(seed: int) -> dict:
    shift = extrapolation(seed)
    worst = min(shift.pop(f"{kind}_at_16") for kind in ("rope", "sinusoidal", "learned"))
    return {**shift, "worst_at_16": worst, **language_models(seed)}
