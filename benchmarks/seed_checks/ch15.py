"""Chapter 15: does RoPE extrapolate? Chapter 6's task (label every token with the one before it) in a
causal decoder, trained 300 steps on 4 to 16 tokens with RoPE, sinusoidal and learned positions, with
every seed varied together; accuracy on positions 16 to 31 of validation sequences of 32 tokens, and on
whole sequences of 16.

The chapter asserts, over its seeds 0 to 2, that every encoding reaches 90 % at length 16, that RoPE
labels at least 60 % of the new positions and the other two at most 20 %; and, on the means over its
seeds, that RoPE is below both absolute encodings at position 1 and at length 4, stays at 99 % or
more up to position 16 at least, and beats both at position 15 by 0.2 or more (here, per seed, the
bar is only that it beats both: one seed's gap is near 0.1). On every seed it
asserts that RoPE labels at least 95 % of positions 16 to 31 right when each sees only its last 16
tokens, and that RoPE answers the marker of position 0 at position 1 whenever the first two tokens
are equal, and whenever it is wrong there. Exercise 3 trains the same decoder without positions (NoPE: a sinusoidal table of zeros)
and asserts, on every seed, below 90 % at length 16 (below every encoding), at least 20 % on positions
16 to 31, and positions 1-4 above positions 12-15 by 0.2. Here all are measured for each seed.
"""
import torch
import torch.nn.functional as F

import tfmini

BARS = {"rope_beyond": (">=", 0.6), "sinusoidal_beyond": ("<=", 0.2), "learned_beyond": ("<=", 0.2),
        "worst_at_16": (">=", 0.9), "abs_minus_rope_pos1": (">=", 0.001), "abs_minus_rope_len4": (">=", 0.001),
        "rope_last_99": (">=", 16), "rope15_minus_abs": (">=", 0.05), "rope_window": (">=", 0.95),
        "rope_pos1_same_first": (">=", 1.0), "nope_at_16": ("<=", 0.9), "nope_beyond": (">=", 0.2),
        "nope_early_minus_late": (">=", 0.2)}

PAD, FIRST, V_SHIFT, L_TRAIN, L_LONG = 0, 1, 12, 16, 32
SHIFT_MODEL = dict(d_model=32, num_heads=2, num_decoder_layers=2, d_ff=64, dropout=0.0, norm_first=True,
                   activation="gelu")


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


@torch.no_grad()
def windowed_accuracy(model, window=L_TRAIN):
    device = next(model.parameters()).device
    x, labels = (torch.tensor(t, device=device) for t in zip(*shift_sequences(200, L_LONG, L_LONG, seed=10_000 + L_LONG)))
    return torch.stack([(model(x[:, p - window + 1:p + 1])[:, -1].argmax(-1) == labels[:, p]).float().mean()
                        for p in range(L_TRAIN, L_LONG)]).mean().item()


@torch.no_grad()
def pos1_same_first(model):
    """At position 1 of the length-32 test sequences: the smaller of the shares labelled FIRST among
    those whose first two tokens are equal and among those labelled wrong (both 1 in the chapter)."""
    device = next(model.parameters()).device
    x = torch.tensor([t for t, _ in shift_sequences(200, L_LONG, L_LONG, seed=10_000 + L_LONG)], device=device)
    same = x[:, 0] == x[:, 1]
    pred = model(x)[:, 1].argmax(-1)
    wrong = pred != x[:, 0]                                  # the label of position 1 is the token at 0
    return min((pred[same] == FIRST).float().mean().item(), (pred[wrong] == FIRST).float().mean().item())


def extrapolation(seed):
    out = {}
    for kind in ("rope", "sinusoidal", "learned", "nope"):
        tfmini.set_seed(seed)
        positional = "sinusoidal" if kind == "nope" else kind
        model = tfmini.DecoderOnlyLM(tfmini.TransformerConfig(V_SHIFT, max_len=L_LONG, positional=positional,
                                                              **SHIFT_MODEL))
        if kind == "nope":
            model.decoder.pos.pe.zero_()                     # chapter 15, exercise 3: no positions at all
        data = tfmini.Batches(shift_sequences(4000, 4, L_TRAIN, seed), batch_size=64, seed=seed)
        tfmini.fit(model, data, steps=300, lr=6e-3, warmup_steps=30, schedule="cosine", loss_fn=tagging_loss,
                   seed=seed, progress=False)
        by_position = accuracy_by_position(model, L_LONG)
        out[f"{kind}_beyond"] = by_position[L_TRAIN:].mean().item()
        out[f"{kind}_at_16"] = accuracy_by_position(model, L_TRAIN).mean().item()
        if kind == "nope":
            out["nope_early_minus_late"] = (by_position[1:5].mean() - by_position[12:16].mean()).item()
            continue
        out[f"{kind}_15"] = by_position[L_TRAIN - 1].item()
        out[f"{kind}_pos1"] = by_position[1].item()
        out[f"{kind}_len4"] = accuracy_by_position(model, 4).mean().item()
        if kind == "rope":
            out["rope_last_99"] = int((by_position >= 0.99).nonzero().max())
            out["rope_window"] = windowed_accuracy(model)
            out["rope_pos1_same_first"] = pos1_same_first(model)
    return out



def run(seed: int) -> dict:
    shift = extrapolation(seed)
    worst = min(shift.pop(f"{kind}_at_16") for kind in ("rope", "sinusoidal", "learned"))
    shift["rope15_minus_abs"] = shift.pop("rope_15") - max(shift.pop("sinusoidal_15"), shift.pop("learned_15"))
    gaps = {f"abs_minus_rope_{at}": min(shift.pop(f"sinusoidal_{at}"), shift.pop(f"learned_{at}")) - shift.pop(f"rope_{at}")
            for at in ("pos1", "len4")}
    return {**shift, "worst_at_16": worst, **gaps}
