"""Chapter 6 (positional encoding), "Does it extrapolate? A measurement": the cells of ``shift_task``,
``Tagger``, ``make_tagger``, ``train_tagger`` and ``measure``, the training and test cells (sinusoidal
and learned positions, stopping on the validation set; here with seed ``seed``) and the cell that
repeats them with more seeds (sinusoidal: here seeds ``seed .. seed + 4``, the chapter's 0 .. 4;
learned: ``seed .. seed + 2``, the chapter's 0 .. 2; the metrics ending in 5 are over these). Runs are
cached, so seeds 0, 1 and 2 train each (kind, seed) once. The learned tagger is trained once more
with its table started at the sinusoids' scale (std 1/sqrt(2) instead of 0.02), as the chapter does
for seeds 0 .. 2, to compare the steps to 99.9 %. Exercise 3's solution trains a tagger without
positions on the chapter's training set."""

import torch

import tfmini

L_TRAIN, L_TEST, VAL_SEED = 16, 40, 1000
BARS = {"sin_min_train_len": (">=", 0.99), "lrn_min_train_len": (">=", 0.99),
        "sin_in": (">=", 0.75), "lrn_in": (">=", 0.75), "sin_len40": ("<=", 0.7), "lrn_len40": ("<=", 0.7),
        "sin_beyond": ("<=", 0.4), "lrn_beyond": ("<=", 0.3), "lrn_first": ("<=", 0.25),
        # the five-seed cell
        "min_train_len5": (">=", 0.99), "sin_first_mean5": (">=", 0.25), "sin_beyond_max5": ("<=", 0.4),
        "sin_beyond_mean5": (">=", 0.12), "sin_minus_lrn_beyond5": (">=", 0.0), "lrn_first_max5": ("<=", 0.25),
        "lrn_beyond_max5": ("<=", 0.3),
        # the learned table started at the sinusoids' scale (std 1/sqrt(2)) needs fewer steps than at 0.02,
        # and at most one check (100 steps) more than the sinusoids
        "lrn_minus_scaled_steps": (">=", 100), "scaled_minus_sin_steps": ("<=", 100),
        # exercise 3's solution: the tagger without positions (its sinusoidal table zeroed), 300 steps
        "blind_acc": ("<=", 0.5)}


def shift_task(n, min_len, max_len, seed):
    return [(src, ["_"] + src[:-1]) for src, _ in tfmini.copy_task(n, min_len, max_len, seed=seed)]


VOCAB = tfmini.Vocab.build(src + labels for src, labels in shift_task(4000, 4, L_TRAIN, seed=0))


def to_ids(pairs):
    return [(VOCAB.encode(src), [VOCAB.bos_id] + VOCAB.encode(labels)) for src, labels in pairs]


def batch(pairs):
    return next(iter(tfmini.Batches(to_ids(pairs), len(pairs), shuffle=False)))


class Tagger(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.encoder = tfmini.model.Encoder(config)
        self.head = torch.nn.Linear(config.d_model, config.vocab_size)

    def forward(self, src, tgt_in=None):
        return self.head(self.encoder(src)[0])


@torch.no_grad()
def correct(model, src, tgt):
    return model(src).argmax(-1) == tgt[:, 1:], tgt[:, 1:] != VOCAB.pad_id


VAL = batch(shift_task(520, 4, L_TRAIN, seed=VAL_SEED))
TEST = {L: batch(shift_task(200, L, L, seed=100 + L)) for L in range(4, L_TEST + 1)}


def val_accuracy(model):
    ok, real = correct(model, *VAL)
    return {"acc": (ok & real).sum().item() / real.sum().item()}


_RUNS, _STEPS = {}, {}


def train_tagger(kind, seed, pos_std=None):
    if (kind, seed, pos_std) not in _RUNS:
        data = tfmini.Batches(to_ids(shift_task(4000, 4, L_TRAIN, seed=seed)), batch_size=64, seed=seed)
        tfmini.set_seed(seed)
        model = Tagger(tfmini.TransformerConfig(vocab_size=len(VOCAB), d_model=32, num_heads=2, num_encoder_layers=2,
                                                d_ff=64, dropout=0.0, max_len=L_TEST, positional=kind))
        if pos_std is not None:
            torch.nn.init.normal_(model.encoder.pos.embedding.weight, std=pos_std)
        history = tfmini.fit(model, data, steps=1500, lr=3e-3, warmup_steps=50, seed=seed, device="cpu",
                             eval_fn=val_accuracy, eval_every=100, stop_fn=lambda e: e["acc"] >= 0.999, progress=False)
        by_len = torch.tensor([correct(model, *TEST[L])[0].float().mean().item() for L in range(4, L_TEST + 1)])
        _RUNS[kind, seed, pos_std] = (history.evals[-1]["acc"], by_len, correct(model, *TEST[L_TEST])[0].float().mean(0))
        _STEPS[kind, seed, pos_std] = history.evals[-1]["step"]
    return _RUNS[kind, seed, pos_std]


def run(seed):
    torch.set_num_threads(1)
    out = {}
    for kind, short in (("sinusoidal", "sin"), ("learned", "lrn")):
        _, by_len, by_pos = train_tagger(kind, seed)
        out.update({f"{short}_min_train_len": by_len[:L_TRAIN - 3].min().item(), f"{short}_len40": by_len[-1].item(),
                    f"{short}_in": by_pos[:L_TRAIN].mean().item(), f"{short}_first": by_pos[L_TRAIN].item(),
                    f"{short}_beyond": by_pos[L_TRAIN + 1:].mean().item()})
    five = {kind: [train_tagger(kind, s) for s in range(seed, seed + n)] for kind, n in (("sinusoidal", 5), ("learned", 3))}
    first = {k: torch.tensor([p[L_TRAIN].item() for _, _, p in r]) for k, r in five.items()}
    beyond = {k: torch.tensor([p[L_TRAIN + 1:].mean().item() for _, _, p in r]) for k, r in five.items()}
    out["min_train_len5"] = min(min(val, by_len[:L_TRAIN - 3].min().item()) for r in five.values() for val, by_len, _ in r)
    out.update({"sin_first_mean5": first["sinusoidal"].mean().item(), "sin_beyond_max5": beyond["sinusoidal"].max().item(),
                "sin_beyond_mean5": beyond["sinusoidal"].mean().item(),
                "sin_minus_lrn_beyond5": (beyond["sinusoidal"].mean() - beyond["learned"].mean()).item(),
                "lrn_first_max5": first["learned"].max().item(), "lrn_beyond_max5": beyond["learned"].max().item()})
    train_tagger("learned", seed, pos_std=2 ** -0.5)
    out["lrn_minus_scaled_steps"] = _STEPS["learned", seed, None] - _STEPS["learned", seed, 2 ** -0.5]
    out["scaled_minus_sin_steps"] = _STEPS["learned", seed, 2 ** -0.5] - _STEPS["sinusoidal", seed, None]
    tfmini.set_seed(seed)
    blind = Tagger(tfmini.TransformerConfig(vocab_size=len(VOCAB), d_model=32, num_heads=2, num_encoder_layers=2,
                                            d_ff=64, dropout=0.0, max_len=L_TEST, positional="sinusoidal"))
    blind.encoder.pos.pe.zero_()
    data = tfmini.Batches(to_ids(shift_task(4000, 4, L_TRAIN, seed=0)), batch_size=64, seed=seed)
    out["blind_acc"] = tfmini.fit(blind, data, steps=300, lr=3e-3, warmup_steps=50, seed=seed, device="cpu",
                                  eval_fn=val_accuracy, eval_every=100, progress=False).evals[-1]["acc"]
    return out
