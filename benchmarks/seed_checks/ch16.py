"""Chapter 16: chapter 12's text as characters, with every seed varied together: the GPT (learned
positions, LayerNorm, GELU) against the Llama-style decoder with G = 8 and G = 2 key/value heads;
(exercise 3) the G = 2 model with learned positions instead of RoPE and the GPT with RoPE instead of
learned positions, 250 steps each; the GPT with RoPE with RMSNorm in place of LayerNorm, and with
SwiGLU (d_ff = 170, the parameter-matched width) in place of its GELU network; (exercise 4) the
trained G = 8 model with each group of 4 key and value heads averaged into G = 2, at once and after 50
more steps, against a G = 2 model trained from scratch for 50 steps. Validation loss in nats per
character on every second validation window.

The chapter asserts, over its seeds 0 to 2, that the Llama-style models (G = 8 and G = 2) end at least
0.02 nats below the GPT trained with the same seed; (exercise 3) that the G = 2 model with learned
positions ends at least 0.02 nats above it, and the GPT with RoPE at least 0.02 below both the GPT and
the G = 2 model; that the GPT with RoPE with RMSNorm and with SwiGLU each end at least 0.02 below the
GPT, that RMSNorm moves the GPT with RoPE by less than 0.05 either way, and that the G = 2 model ends
on average (over the three seeds) at least 0.03 above each of the two, checked here seed by seed with
a bar of 0; (exercise 4) that the averaged model ends at least 0.02 above both trained models at
once, still 0.02 above the trained G = 2 model after 50 steps, and 0.02 below the 50-step model from
scratch. Here each seed is one set of runs, and the gaps are the metrics.
"""
import torch
import torch.nn.functional as F

import tfmini

BARS = {"gap_g2": (">=", 0.02), "gap_g8": (">=", 0.02), "learned_minus_gpt": (">=", 0.02),
        "gpt_minus_gpt_rope": (">=", 0.02), "g2_minus_gpt_rope": (">=", 0.02),
        "converted_minus_trained": (">=", 0.02), "uptrained_minus_g2": (">=", 0.02),
        "fresh50_minus_uptrained": (">=", 0.02),
        "gpt_minus_rope_rms": (">=", 0.02), "gpt_minus_rope_swiglu": (">=", 0.02),
        "rope_rms_change": ("<=", 0.05), "g2_minus_rope_rms": (">=", 0.0), "g2_minus_rope_swiglu": (">=", 0.0)}

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
    arms = {"gpt": GPT, "g8": {**LLAMA, "num_kv_heads": 8}, "g2": LLAMA, "learned": {**LLAMA, "positional": "learned"},
            "gpt_rope": {**GPT, "positional": "rope"},
            "rope_rms": {**GPT, "positional": "rope", "norm": "rmsnorm"},
            "rope_swiglu": {**GPT, "positional": "rope", "activation": "swiglu", "d_ff": 170}}

    def config(options):
        return tfmini.TransformerConfig(len(vocab), max_len=CONTEXT, **options)

    def fit(model, steps=STEPS, lr=1e-2, warmup=30):
        tfmini.fit(model, tfmini.Batches(train_windows, batch_size=BATCH, seed=seed), steps=steps, lr=lr,
                   warmup_steps=warmup, schedule="cosine", seed=seed, progress=False)
        return model

    def val_loss(model):
        device = next(model.parameters()).device
        with torch.no_grad():
            total = sum(F.cross_entropy(model(w[:, :-1]).transpose(1, 2), w[:, 1:], reduction="sum").item()
                        for w in val_windows.to(device).split(512))
        return total / (val_windows.shape[0] * CONTEXT)

    def to_g2(model):
        tfmini.set_seed(seed)
        grouped = tfmini.DecoderOnlyLM(config(LLAMA)).to(next(model.parameters()).device)
        grouped.load_state_dict({name: (w.view(2, 4, 8, -1).mean(1).reshape(16, -1)
                                        if name.endswith(("k_proj.weight", "v_proj.weight")) else w)
                                 for name, w in model.state_dict().items()})
        return grouped

    loss, models = {}, {}
    for arm, options in arms.items():
        tfmini.set_seed(seed)
        models[arm] = fit(tfmini.DecoderOnlyLM(config(options)))
        loss[arm] = val_loss(models[arm])
    converted = val_loss(to_g2(models["g8"]))
    uptrained = val_loss(fit(to_g2(models["g8"]), steps=50, lr=5e-3, warmup=5))
    tfmini.set_seed(seed)
    fresh50 = val_loss(fit(tfmini.DecoderOnlyLM(config(LLAMA)), steps=50, warmup=5))
    return {"gap_g2": loss["gpt"] - loss["g2"], "gap_g8": loss["gpt"] - loss["g8"],
            "learned_minus_gpt": loss["learned"] - loss["gpt"],
            "gpt_minus_gpt_rope": loss["gpt"] - loss["gpt_rope"], "g2_minus_gpt_rope": loss["g2"] - loss["gpt_rope"],
            "converted_minus_trained": converted - max(loss["g8"], loss["g2"]),
            "uptrained_minus_g2": uptrained - loss["g2"], "fresh50_minus_uptrained": fresh50 - uptrained,
            "gpt_minus_rope_rms": loss["gpt"] - loss["rope_rms"],
            "gpt_minus_rope_swiglu": loss["gpt"] - loss["rope_swiglu"],
            "rope_rms_change": abs(loss["rope_rms"] - loss["gpt_rope"]),
            "g2_minus_rope_rms": loss["g2"] - loss["rope_rms"],
            "g2_minus_rope_swiglu": loss["g2"] - loss["rope_swiglu"]}



def run(seed: int) -> dict:
    return language_models(seed)
