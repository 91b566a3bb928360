"""Chapter 12: the character-level DecoderOnlyLM on Python source (the cell that trains it and the
checks that follow).

It trains a fixed 700 steps. Besides the validation loss, the checks cover its loss by position
(against the bigram model, and a curve within 0.3 bits between positions 10-20 and 41-64), the
indented lines of the chapter's two samples, and for sampling seeds 0, 1, 2 the model's surprisal of
its draws (bits per character): its mean over the three draws at least 0.3 bits lower at temperature
0.7 than at 1.0. Reported, not bars (the chapter does not assert them): the smallest of the three
per-draw gaps, and the share of spaces at 0.7 less that at 1.0 (the smallest of the three).
Exercise 1: 300 steps of fit's default schedule, on the same batches, for a decoder-only model and
for encoder-only models with sinusoidal and learned positions, the learned table also at the
sinusoids' scale (std 1/sqrt(2) instead of 0.02) (next-token loss, no mask).
"""
import math

import torch
import torch.nn.functional as F

import tfmini

BARS = {"lm_val_nats": ("<=", 2.0), "lm_pos1_minus_rest_nats": (">=", 0.5), "lm_pos1_minus_bigram_bits": (">=", 0.0),
        "lm_late_minus_mid_bits": (">=", -0.3), "lm_late_minus_mid_bits_upper": ("<=", 0.3), "lm_samples_indented": (">=", 1),
        "lm_bits_10_minus_07": (">=", 0.3),
        "ex1_sin_over_dec": ("<=", 0.5), "ex1_learned_over_sin": (">=", 2.0), "ex1_scaled_over_dec": ("<=", 0.5),
        "ex1_learned_minus_dec_nats": (">=", -0.05), "ex1_learned_minus_dec_nats_upper": ("<=", 0.3),
        "ex1_sin_last_minus_dec_last_nats": (">=", 0.5), "ex1_sin_inner_over_dec_last": ("<=", 0.5)}


def run(seed: int) -> dict:
    text = tfmini.python_source_text()
    vocab = tfmini.Vocab(text)
    train_ids, val_ids = tfmini.train_val_split(torch.tensor([vocab.stoi[c] for c in text]), val_fraction=0.1)
    pairs = torch.zeros(len(vocab), len(vocab), dtype=torch.double).index_put_(
        (train_ids[:-1], train_ids[1:]), torch.ones(len(train_ids) - 1, dtype=torch.double), accumulate=True)
    bigram = (pairs + 0.1) / (pairs + 0.1).sum(dim=1, keepdim=True)
    bigram_val = -bigram[val_ids[:-1], val_ids[1:]].log().mean().item()
    val = torch.tensor(tfmini.lm_windows(val_ids, 65))
    tfmini.set_seed(seed)
    gpt = tfmini.DecoderOnlyLM(tfmini.TransformerConfig(len(vocab), d_model=64, num_heads=4, num_decoder_layers=2,
                                                        dropout=0.0, max_len=64, norm_first=True, positional="learned"))
    tfmini.fit(gpt, tfmini.Batches(tfmini.lm_windows(train_ids, 65, stride=32), batch_size=32, seed=seed),
               steps=700, lr=1e-2, warmup_steps=50, schedule="cosine", seed=seed, progress=False)
    gpt.eval()
    device = next(gpt.parameters()).device
    val = val.to(device)
    with torch.no_grad():
        by_position = torch.cat([F.cross_entropy(gpt(w[:, :-1]).transpose(1, 2), w[:, 1:], reduction="none")
                                 for w in val.split(512)]).mean(dim=0).cpu()          # (64,) nats
    bits = lambda nats: float(nats) / math.log(2)
    mid, late = bits(by_position[9:20].mean()), bits(by_position[40:].mean())

    def sample_text(temperature, sampling_seed):             # the chapter's chunked sampling, prompt "    def "
        g = torch.Generator().manual_seed(sampling_seed)              # returns the text and the draws' surprisal (bits)
        ids = torch.tensor([vocab.encode(list("    def "))], device=device)
        nats = []
        while ids.shape[1] < 8 + 320:
            context = ids[:, -56:]
            new = tfmini.sample(gpt, context, max_new_tokens=64 - context.shape[1], temperature=temperature, generator=g)
            with torch.no_grad():                                      # the logits each draw came from
                logits = gpt(torch.cat([context, new], dim=1)[:, :-1])[0, context.shape[1] - 1:]
            nats.append(F.cross_entropy(logits, new[0], reduction="none"))
            ids = torch.cat([ids, new], dim=1)
        return "".join(vocab.decode(ids[0, :8 + 320].tolist())), bits(torch.cat(nats)[:320].mean())

    draws = {tau: [sample_text(tau, s) for s in (0, 1, 2)] for tau in (0.7, 1.0)}
    indented = [sum(line.startswith("    ") and bool(line.strip()) for line in runs[0][0].split("\n")[1:])
                for runs in draws.values()]                           # the chapter's samples: sampling seed 0
    spaces = [a[8:].count(" ") - b[8:].count(" ") for (a, _), (b, _) in zip(draws[0.7], draws[1.0])]
    surprisal = [b - a for (_, a), (_, b) in zip(draws[0.7], draws[1.0])]

    def last20(model, pos_std=None, **kw):                         # exercise 1: mean loss of the last 20 steps
        tfmini.set_seed(seed)
        m = model(tfmini.TransformerConfig(len(vocab), d_model=64, num_heads=4, dropout=0.0, max_len=64,
                                           norm_first=True, **kw))
        if pos_std is not None:                                    # the learned table at the sinusoids' scale
            torch.nn.init.normal_(m.encoder.pos.embedding.weight, std=pos_std)
        h = tfmini.fit(m, tfmini.Batches(tfmini.lm_windows(train_ids, 65, stride=32), batch_size=32, seed=seed),
                       steps=300, lr=1e-2, warmup_steps=50, seed=seed, log_every=1, progress=False)
        m.eval()
        with torch.no_grad():
            pos = torch.cat([F.cross_entropy(m(w[:, :-1]).transpose(1, 2), w[:, 1:], reduction="none")
                             for w in val.split(512)]).mean(dim=0).cpu()
        return sum(h.loss[-20:]) / 20, pos

    dec, dec_pos = last20(tfmini.DecoderOnlyLM, num_decoder_layers=2, positional="learned")
    sin, sin_pos = last20(tfmini.EncoderOnlyLM, num_encoder_layers=2, positional="sinusoidal")
    learned, _ = last20(tfmini.EncoderOnlyLM, num_encoder_layers=2, positional="learned")
    scaled, _ = last20(tfmini.EncoderOnlyLM, pos_std=2 ** -0.5, num_encoder_layers=2, positional="learned")
    return {"lm_bits_10_minus_07": sum(surprisal) / 3, "lm_bits_10_minus_07_min": min(surprisal),
            "lm_space_share_07_minus_10": min(spaces) / 320,
            "ex1_sin_over_dec": sin / dec, "ex1_learned_over_sin": learned / sin, "ex1_scaled_over_dec": scaled / dec,
            "ex1_learned_minus_dec_nats": learned - dec, "ex1_learned_minus_dec_nats_upper": learned - dec,
            "ex1_sin_last_minus_dec_last_nats": (sin_pos[-1] - dec_pos[-1]).item(),
            "ex1_sin_inner_over_dec_last": (sin_pos[:-1].mean() / dec_pos[-1]).item(),
            "lm_val_nats": by_position.mean().item(),
            "lm_pos1_minus_rest_nats": (by_position[0] - by_position[9:].mean()).item(),
            "lm_pos1_minus_bigram_bits": bits(by_position[0]) - bits(bigram_val),
            "lm_late_minus_mid_bits": late - mid, "lm_late_minus_mid_bits_upper": late - mid,  # one value, two bounds
            "lm_samples_indented": min(indented)}
