"""Chapter 13: the EncoderOnlyLM on the "it" sentences (the cell that trains it with the masked-LM
loss, and the probe, similarity and agreement checks that follow, on the trained model and on the
untrained one with the same initial weights; exercise 1's patching of the first layer's output).

It trains a fixed 700 steps; the masking draws from torch's global generator, seeded by fit.
"""
import copy
from functools import partial

import torch
import torch.nn.functional as F

import tfmini

BARS = {"mlm_last_loss": ("<=", 0.8), "probe_trained": (">=", 0.85),
        "patch_it_shift": ("<=", 0.1),                    # exercise 1: largest mean shift, pronoun's vector swapped
        "blocks_trained_vs_untrained": (">=", 0.25),      # same-kind similarity, trained minus untrained
        "agree_animal_ref": (">=", 0.75), "agree_place_ref": (">=", 0.75),
        "probe_untrained_off_chance": ("<=", 0.15),       # |accuracy - 0.5|
        "agree_untrained_off_half": ("<=", 0.05),         # largest |P(agrees) - 0.5| of the four
        "blocks_untrained_gap": ("<=", 0.2),              # same-kind minus other-kind mean similarity
        "cos_untrained_centred": ("<=", 0.99)}            # centred tired/wide "it" (the chapter asserts < 0.99)
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


def run(seed: int) -> dict:
    adjectives = ANIMAL_ADJ + PLACE_ADJ
    pairs = [(a, p) for a in range(6) for p in range(6)]
    held = lambda a, p: (a + p) % 4 == 0
    numbers = ((0, 0), (0, 1), (1, 0), (1, 1))
    sents = lambda ps, adjs=adjectives: [sentence(a, p, na, np_, j) for a, p in ps for na, np_ in numbers for j in adjs]
    facts = [["the", noun[n], "were" if n else "was", adj, "."] for nouns, adjs in ((ANIMALS, ANIMAL_ADJ), (PLACES, PLACE_ADJ))
             for noun in nouns for n in (0, 1) for adj in adjs]
    test_pairs = [ap for ap in pairs if held(*ap)]
    corpus = sents([ap for ap in pairs if not held(*ap)]) + facts
    vocab = tfmini.Vocab([w for s in corpus for w in s] + ["<mask>"])
    MASK = vocab.stoi["<mask>"]
    tfmini.set_seed(seed)
    bert = tfmini.EncoderOnlyLM(tfmini.TransformerConfig(len(vocab), d_model=64, num_heads=4, num_encoder_layers=2,
                                                         dropout=0.0, max_len=12, positional="learned"))
    untrained = copy.deepcopy(bert)                         # the same initial weights, never trained
    h = tfmini.fit(bert, tfmini.Batches([vocab.encode(s) for s in corpus], batch_size=64, seed=seed), steps=700, lr=5e-3,
                   warmup_steps=30, schedule="cosine", seed=seed, progress=False,
                   loss_fn=partial(tfmini.masked_lm_loss, mask_id=MASK, mask_prob=0.3))
    device = next(bert.parameters()).device
    bert.eval()
    untrained.to(device).eval()
    encode = lambda ss: torch.tensor([vocab.encode(s) for s in ss], device=device)
    it_sents = [s for s in sents(test_pairs) if s[IT] == "it"]

    @torch.no_grad()
    def it_vectors(model, ss):
        return model.hidden_states(encode(ss))[:, IT].cpu()

    seen = ANIMAL_ADJ[:4] + PLACE_ADJ[:4]
    fit_s, test_s = [s for s in it_sents if s[10] in seen], [s for s in it_sents if s[10] not in seen]
    y = {k: torch.tensor([float(s[10] in ANIMAL_ADJ) for s in ss]) for k, ss in (("fit", fit_s), ("test", test_s))}

    def probe(model):
        z = {"fit": it_vectors(model, fit_s), "test": it_vectors(model, test_s)}
        mu, sd = z["fit"].mean(0), z["fit"].std(0) + 1e-6
        X = lambda v: torch.cat([(v - mu) / sd, torch.ones(len(v), 1)], dim=1)
        w = torch.linalg.solve(X(z["fit"]).T @ X(z["fit"]) + torch.eye(X(z["fit"]).shape[1]),
                               X(z["fit"]).T @ (2 * y["fit"] - 1))
        return ((X(z["test"]) @ w > 0) == y["test"].bool()).float().mean().item()

    forms = {slot: [torch.tensor([vocab.stoi[w[k]] for w in nouns]) for k in (0, 1)] for slot, nouns in ((1, ANIMALS), (5, PLACES))}

    @torch.no_grad()
    def p_agree(model, slot, adjs):
        ss = [sentence(a, p, n, n, adj) for a, p in test_pairs for n in (0, 1) for adj in adjs]
        ids = encode(ss)
        ids[:, slot] = MASK
        prob = model(ids)[:, slot].softmax(-1).cpu()
        mass = torch.stack([prob[:, f].sum(-1) for f in forms[slot]], dim=1)
        number = torch.tensor([s[IT] == "they" for s in ss]).long()
        return (mass.gather(1, number[:, None])[:, 0] / mass.sum(1)).mean().item()

    @torch.no_grad()
    def plural_shares(model, ss, donors=None, pos=IT, slot=1):
        hide = lambda x: encode(x).index_fill_(1, torch.tensor([slot], device=device), MASK)
        first, saved, hooks = model.encoder.layers[0], {}, []
        if donors is not None:
            grab = first.register_forward_hook(lambda m, inp, out: saved.update(x=out[0]))
            model(hide(donors))
            grab.remove()

            def patch(m, inp, out):
                x = out[0].clone()
                x[:, pos] = saved["x"][:, pos]
                return (x, *out[1:])
            hooks.append(first.register_forward_hook(patch))
        try:
            prob = model(hide(ss))[:, slot].softmax(-1).cpu()
        finally:
            for hk in hooks:
                hk.remove()
        return (prob[:, forms[slot][1]].sum(-1) / prob[:, torch.cat(forms[slot])].sum(-1)).mean().item()

    animal_side = [sentence(a, p, 1, 1, adj) for a, p in test_pairs for adj in ANIMAL_ADJ]
    place_side = [sentence(a, p, 1, 1, adj) for a, p in test_pairs for adj in PLACE_ADJ]
    it_shifts, slot_shifts = [], []
    for ss, donors in ((animal_side, place_side), (place_side, animal_side)):
        base = plural_shares(bert, ss)
        it_shifts.append(abs(plural_shares(bert, ss, donors, pos=IT) - base))
        slot_shifts.append(abs(plural_shares(bert, ss, donors, pos=1) - base))

    def same_kind_mean(model):
        zz = it_vectors(model, it_sents)
        zz = zz - zz.mean(dim=0)
        ba = torch.stack([zz[torch.tensor([s[10] == adj for s in it_sents])].mean(dim=0) for adj in adjectives])
        ss_ = F.cosine_similarity(ba[:, None], ba[None], dim=-1)
        return ss_[same_kind].mean().item()

    # the similarity cell, on the untrained model: centred "it" of the lecture's pair, and per-adjective blocks
    z = it_vectors(untrained, it_sents)
    mean = z.mean(dim=0)
    pair = it_vectors(untrained, [sentence(0, 0, 0, 0, "tired"), sentence(0, 0, 0, 0, "wide")]) - mean
    z = z - mean
    by_adj = torch.stack([z[torch.tensor([s[10] == adj for s in it_sents])].mean(dim=0) for adj in adjectives])
    sim = F.cosine_similarity(by_adj[:, None], by_adj[None], dim=-1)
    kind = torch.tensor([adj in ANIMAL_ADJ for adj in adjectives])
    eye = torch.eye(len(adjectives), dtype=torch.bool)
    same_kind = (kind[:, None] == kind[None]) & ~eye
    agree_untrained = [p_agree(untrained, slot, adjs) for slot in (1, 5) for adjs in (ANIMAL_ADJ, PLACE_ADJ)]
    return {"mlm_last_loss": h.loss[-1], "probe_trained": probe(bert),
            "patch_it_shift": max(it_shifts), "patch_slot_shift": min(slot_shifts),
            "blocks_trained_vs_untrained": same_kind_mean(bert) - same_kind_mean(untrained),
            "agree_animal_ref": p_agree(bert, 1, ANIMAL_ADJ), "agree_place_ref": p_agree(bert, 5, PLACE_ADJ),
            "probe_untrained_off_chance": abs(probe(untrained) - 0.5),
            "agree_untrained_off_half": max(abs(p - 0.5) for p in agree_untrained),
            "blocks_untrained_gap": (sim[same_kind].mean() - sim[~same_kind & ~eye].mean()).item(),
            "cos_untrained_centred": F.cosine_similarity(pair[0], pair[1], dim=0).item()}
