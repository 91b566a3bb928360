"""Chapter 16: chapter 12's text as characters, with every seed varied together: the GPT (learned
positions, LayerNorm, GELU) against the Llama-style decoder with G = 8 and G = 2 key/value heads, and
(exercise 3) the G = 2 model with learned positions instead of RoPE, 250 steps each; validation loss in
nats per character on every second validation window.

The chapter asserts, over its seeds 0 to 2, that the Llama-style models (G = 8 and G = 2) end at least
0.02 nats below the GPT trained with the same seed, and (exercise 3) that the G = 2 model with learned
positions ends at least 0.02 nats above it; here each seed is one set of runs, and the gaps are the
metrics.
"""
import torch
import torch.nn.functional as F

import tfmini

BARS = {"gap_g2": (">=", 0.02), "gap_g8": (">=", 0.02), "learned_minus_gpt": (">=", 0.02)}

CONTEXT, BATCH, STEPS = 32, 16, 250
GPT = dict(d_model=64, num_heads=8, num_decoder_layers=2, dropout=0.0, norm_first=True, positional="learned",
           activation="gelu")
LLAMA = dict(d_model=64, num_heads=8, num_kv_heads=2, num_decoder_layers=2, d_ff=195, dropout=0.0, norm_first=True,
             norm="rmsnorm", positional="rope", activation="swiglu", attention_bias=False, ffn_bias=False,
             embed_scale=False, tie_weights=False)


def language_models(seed):
    text = tfmini.python_source_text()
    vocab = tfmini.Vocab(text)
    ids = torch.tensor([vocab.stoi[c] for c in text])
    train_ids, val_ids = tfmini.train_val_split(ids, val_fraction=0.1)
    train_windows = tfmini.lm_windows(train_ids, CONTEXT + 1, stride=CONTEXT // 2)
    val_windows = torch.tensor(tfmini.lm_windows(val_ids, CONTEXT + 1))[::2]
    arms = {"gpt": GPT, "g8": {**LLAMA, "num_kv_heads": 8}, "g2": LLAMA, "learned": {**LLAMA, "positional": "learned"}}
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
    return {"gap_g2": loss["gpt"] - loss["g2"], "gap_g8": loss["gpt"] - loss["g8"],
            "learned_minus_gpt": loss["learned"] - loss["gpt"]}



def run(seed: int) -> dict:
    return language_models(seed)
