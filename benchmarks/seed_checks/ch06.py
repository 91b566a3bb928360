"""Chapter 6 (positional encoding), "Does it extrapolate? A measurement": the cells of ``shift_task``,
``Tagger``, ``make_tagger``, ``train_tagger`` and ``measure``, the training and test cells (sinusoidal
and learned positions, stopping on the validation set) and the cell that repeats the sinusoidal run
with four more seeds (here seeds ``seed + 1 .. seed + 4``)."""

import torch

import tfmini

L_TRAIN, L_TEST, VAL_SEED = 16, 40, 1000
BARS = {"sin_min_train_len": (">=", 0.99), "lrn_min_train_len": (">=", 0.99),
        "sin_in": (">=", 0.75), "lrn_in": (">=", 0.75), "sin_len40": ("<=", 0.7), "lrn_len40": ("<=", 0.7),
        "sin_beyond": ("<=", 0.4), "lrn_beyond": ("<=", 0.3), "lrn_first": ("<=", 0.25),
        "sin_first_mean5": (">=", 0.25)}


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


def train_tagger(kind, seed):
    data = tfmini.Batches(to_ids(shift_task(4000, 4, L_TRAIN, seed=seed)), batch_size=64, seed=seed)
    tfmini.set_seed(seed)
    model = Tagger(tfmini.TransformerConfig(vocab_size=len(VOCAB), d_model=32, num_heads=2, num_encoder_layers=2,
                                            d_ff=64, dropout=0.0, max_len=L_TEST, positional=kind))
    tfmini.fit(model, data, steps=1500, lr=3e-3, warmup_steps=50, seed=seed, device="cpu", eval_fn=val_accuracy,
               eval_every=100, stop_fn=lambda e: e["acc"] >= 0.999, progress=False)
    by_len = torch.tensor([correct(model, *TEST[L])[0].float().mean().item() for L in range(4, L_TEST + 1)])
    return by_len, correct(model, *TEST[L_TEST])[0].float().mean(0)


def run(seed):
    torch.set_num_threads(1)
    out = {}
    for kind, short in (("sinusoidal", "sin"), ("learned", "lrn")):
        by_len, by_pos = train_tagger(kind, seed)
        out.update({f"{short}_min_train_len": by_len[:L_TRAIN - 3].min().item(), f"{short}_len40": by_len[-1].item(),
                    f"{short}_in": by_pos[:L_TRAIN].mean().item(), f"{short}_first": by_pos[L_TRAIN].item(),
                    f"{short}_beyond": by_pos[L_TRAIN + 1:].mean().item()})
    firsts = [out["sin_first"]] + [train_tagger("sinusoidal", s)[1][L_TRAIN].item() for s in range(seed + 1, seed + 5)]
    out["sin_first_mean5"] = sum(firsts) / 5
    return out
