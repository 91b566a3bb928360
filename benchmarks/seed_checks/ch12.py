"""Chapter 12: the character-level DecoderOnlyLM on Python source, and the EncoderOnlyLM on the "it"
sentences (the cells that train them and the probe and agreement checks that follow).

Both train a fixed 700 steps; the masking of the MLM draws from torch's global generator, seeded by fit.
The language model's checks also cover its validation loss by position (against the bigram model and
between positions 10-20 and 41-64) and the indented lines of the chapter's two samples.
"""
import math
from functools import partial

import torch
import torch.nn.functional as F

import tfmini

BARS = {"lm_val_nats": ("<=", 2.0), "lm_pos1_minus_rest_nats": (">=", 0.5), "lm_pos1_minus_bigram_bits": (">=", 0.0),
        "lm_late_minus_mid_bits": (">=", -0.1), "lm_late_minus_mid_bits_upper": ("<=", 0.3), "lm_samples_indented": (">=", 1),
        "mlm_last_loss": ("<=", 0.8), "probe_trained": (">=", 0.85),
        "agree_animal_ref": (">=", 0.75), "agree_place_ref": (">=", 0.75)}
ANIMALS = [("chicken", "chickens"), ("dog", "dogs"), ("cat", "cats"), ("horse", "horses"), ("cow", "cows"), ("goat", "goats")]
PLACES = [("road", "roads"), ("street", "streets"), ("river", "rivers"), ("bridge", "bridges"), ("field", "fields"),
          ("yard", "yards")]
ANIMAL_ADJ = ["tired", "slow", "scared", "old", "sleepy", "hungry", "lazy", "weak"]
PLACE_ADJ = ["wide", "busy", "long", "icy", "muddy", "steep", "crowded", "flooded"]
IT = 7


def sentence(a, p, na, np_, adj):
    plural = na if adj in ANIMAL_ADJ else np_
    return ["the", ANIMALS[a][na], "didn't", "cross", "the", PLACES[p][np_], "because",
            "they" if plural else "it", "were" if plural else "was", "too", adj, "."]


def lm_run(seed: int) -> dict:
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

    def sample_text(temperature):                                  # the chapter's chunked sampling, prompt "    def "
        g = torch.Generator().manual_seed(seed)
        ids = torch.tensor([vocab.encode(list("    def "))], device=device)
        while ids.shape[1] < 8 + 320:
            context = ids[:, -56:]
            new = tfmini.sample(gpt, context, max_new_tokens=64 - context.shape[1], temperature=temperature, generator=g)
            ids = torch.cat([ids, new], dim=1)
        return "".join(vocab.decode(ids[0, :8 + 320].tolist()))

    indented = [sum(line.startswith("    ") and bool(line.strip()) for line in sample_text(tau).split("\n")[1:])
                for tau in (0.7, 1.0)]
    return {"lm_val_nats": by_position.mean().item(),
            "lm_pos1_minus_rest_nats": (by_position[0] - by_position[9:].mean()).item(),
            "lm_pos1_minus_bigram_bits": bits(by_position[0]) - bits(bigram_val),
            "lm_late_minus_mid_bits": late - mid, "lm_late_minus_mid_bits_upper": late - mid,  # one value, two bounds
            "lm_samples_indented": min(indented)}


def run(seed: int) -> dict:
    pairs = [(a, p) for a in range(6) for p in range(6)]
    held = lambda a, p: (a + p) % 4 == 0
    numbers = ((0, 0), (0, 1), (1, 0), (1, 1))
    sents = lambda ps, adjs=ANIMAL_ADJ + PLACE_ADJ: [sentence(a, p, na, np_, j) for a, p in ps for na, np_ in numbers for j in adjs]
    facts = [["the", noun[n], "were" if n else "was", adj, "."] for nouns, adjs in ((ANIMALS, ANIMAL_ADJ), (PLACES, PLACE_ADJ))
             for noun in nouns for n in (0, 1) for adj in adjs]
    test_pairs = [ap for ap in pairs if held(*ap)]
    corpus = sents([ap for ap in pairs if not held(*ap)]) + facts
    vocab = tfmini.Vocab([w for s in corpus for w in s] + ["<mask>"])
    MASK = vocab.stoi["<mask>"]
    tfmini.set_seed(seed)
    bert = tfmini.EncoderOnlyLM(tfmini.TransformerConfig(len(vocab), d_model=64, num_heads=4, num_encoder_layers=2,
                                                         dropout=0.0, max_len=12, positional="learned"))
    h = tfmini.fit(bert, tfmini.Batches([vocab.encode(s) for s in corpus], batch_size=64, seed=seed), steps=700, lr=5e-3,
                   warmup_steps=30, schedule="cosine", seed=seed, progress=False,
                   loss_fn=partial(tfmini.masked_lm_loss, mask_id=MASK, mask_prob=0.3))
    device = next(bert.parameters()).device
    encode = lambda ss: torch.tensor([vocab.encode(s) for s in ss], device=device)
    it_sents = [s for s in sents(test_pairs) if s[IT] == "it"]
    seen = ANIMAL_ADJ[:4] + PLACE_ADJ[:4]
    fit_s, test_s = [s for s in it_sents if s[10] in seen], [s for s in it_sents if s[10] not in seen]
    with torch.no_grad():
        z = {k: bert.hidden_states(encode(ss))[:, IT].cpu() for k, ss in (("fit", fit_s), ("test", test_s))}
    y = {k: torch.tensor([float(s[10] in ANIMAL_ADJ) for s in ss]) for k, ss in (("fit", fit_s), ("test", test_s))}
    mu, sd = z["fit"].mean(0), z["fit"].std(0) + 1e-6
    X = lambda v: torch.cat([(v - mu) / sd, torch.ones(len(v), 1)], dim=1)
    w = torch.linalg.solve(X(z["fit"]).T @ X(z["fit"]) + torch.eye(X(z["fit"]).shape[1]), X(z["fit"]).T @ (2 * y["fit"] - 1))
    probe = ((X(z["test"]) @ w > 0) == y["test"].bool()).float().mean().item()
    forms = {slot: [torch.tensor([vocab.stoi[w[k]] for w in nouns]) for k in (0, 1)] for slot, nouns in ((1, ANIMALS), (5, PLACES))}

    def p_agree(slot, adjs):
        ss = [sentence(a, p, n, n, adj) for a, p in test_pairs for n in (0, 1) for adj in adjs]
        ids = encode(ss)
        ids[:, slot] = MASK
        with torch.no_grad():
            prob = bert(ids)[:, slot].softmax(-1).cpu()
        mass = torch.stack([prob[:, f].sum(-1) for f in forms[slot]], dim=1)
        number = torch.tensor([s[IT] == "they" for s in ss]).long()
        return (mass.gather(1, number[:, None])[:, 0] / mass.sum(1)).mean().item()

    return {**lm_run(seed), "mlm_last_loss": h.loss[-1], "probe_trained": probe,
            "agree_animal_ref": p_agree(1, ANIMAL_ADJ), "agree_place_ref": p_agree(5, PLACE_ADJ)}
