"""Chapter 3 (attention, in general): the cell that trains a bilinear and an additive score on the
"closest to the query's line" task, the cell that draws their scores around the circle, the cell
that trains the lookup task through the softmax and measures it as a hard lookup, and the hidden solution of
exercise 1 that trains it with the straight-through estimator (``line_task``, ``lookup_task``, ``train_lookup``).

Recipe as in the chapter: 500 Adam steps (lr 1e-2) on batches of 256 for the line task, 300 Adam
steps (lr 0.05) for the lookup task; test sets from the generator seeds 1 and 5, scored once. The line
task's training generator is seeded 2 + 100 * seed and its scores' initial weights come from
tfmini.set_seed(seed), as in the book, which trains it with seeds 0, 1 and 2. The lookup task's
generators are seeded 3 and 4 in the book (seed 0), here 3 and 4 + 100 * seed.
"""
import math

import torch
import torch.nn.functional as F

import tfmini

BARS = {"line_additive_acc": (">=", 0.8), "line_bilinear_acc": ("<=", 0.4), "line_dot_acc": ("<=", 0.6),
        "line_ce_gap": (">=", 1.0), "line_range_ratio": (">=", 10.0), "line_bilinear_shrink": ("<=", 0.5),
        "lookup_soft_loss_ratio": ("<=", 0.3), "lookup_hard_loss_ratio": ("<=", 0.3), "lookup_soft_acc": (">=", 0.85),
        "lookup_start_acc": ("<=", 0.3), "st_acc": (">=", 0.8), "st_loss_ratio": ("<=", 0.3)}


def line_task(n, generator, num_keys=8):
    q = F.normalize(torch.randn(n, 1, 2, generator=generator), dim=-1)
    k = F.normalize(torch.randn(n, num_keys, 2, generator=generator), dim=-1)
    return q, k, (q @ k.transpose(1, 2))[:, 0].abs().argmax(-1)


def lookup_task(n, generator, num_keys=6, d_x=8):
    keys = torch.randn(n, num_keys, d_x, generator=generator)
    vals = torch.randn(n, num_keys, generator=generator)
    target = torch.randint(0, num_keys, (n,), generator=generator)
    return keys[torch.arange(n), target] + 0.3 * torch.randn(n, d_x, generator=generator), keys, vals, target


def softmax_weights(e):
    return e.softmax(-1)


def straight_through(e):
    soft = e.softmax(-1)
    return F.one_hot(e.argmax(-1), e.shape[-1]).to(soft.dtype) + soft - soft.detach()


def train_lookup(weights_fn, seed, steps=300, batch=256):
    W = (0.1 * torch.randn(8, 8, generator=torch.Generator().manual_seed(3 + 100 * seed))).requires_grad_()
    optimiser, generator, losses, hard = torch.optim.Adam([W], lr=0.05), torch.Generator().manual_seed(4 + 100 * seed), [], []
    x_held, keys_held, _, target_held = lookup_task(2000, torch.Generator().manual_seed(5))
    accuracy = lambda: (((x_held @ W)[:, None, :] * keys_held).sum(-1).argmax(-1) == target_held).float().mean().item()
    with torch.no_grad():
        start = accuracy()
    rows = torch.arange(batch)
    for _ in range(steps):
        x, keys, vals, target = lookup_task(batch, generator)
        e = ((x @ W)[:, None, :] * keys).sum(-1)
        loss = (((weights_fn(e) * vals).sum(-1) - vals[rows, target]) ** 2).mean()
        losses.append(loss.item())
        hard.append(((vals[rows, e.argmax(-1)] - vals[rows, target]) ** 2).mean().item())
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        return losses, hard, start, accuracy()


def run(seed: int) -> dict:
    torch.set_num_threads(1)
    tfmini.set_seed(seed)
    q_test, k_test, target_test = line_task(4000, torch.Generator().manual_seed(1))
    scorers = {"dot": tfmini.DotScore(), "bilinear": tfmini.BilinearScore(2, 2), "additive": tfmini.AdditiveScore(2, 2, 32)}
    ce, acc, spread, angles = {}, {}, {}, torch.linspace(-math.pi, math.pi, 361)
    W_norm_start = scorers["bilinear"].W.weight.norm().item()
    circle = torch.stack([angles.cos(), angles.sin()], dim=-1)[None]
    for name, scorer in scorers.items():
        if name != "dot":
            optimiser, generator = torch.optim.Adam(scorer.parameters(), lr=1e-2), torch.Generator().manual_seed(2 + 100 * seed)
            for _ in range(500):
                q, k, target = line_task(256, generator)
                loss = F.cross_entropy(scorer(q, k)[:, 0], target)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        with torch.no_grad():
            e = scorer(q_test, k_test)[:, 0]
            ce[name], acc[name] = F.cross_entropy(e, target_test).item(), (e.argmax(-1) == target_test).float().mean().item()
            e = scorer(torch.tensor([[[1.0, 0.0]]]), circle)[0, 0]
            spread[name] = (e.max() - e.min()).item()
    soft_losses, hard_losses, start_acc, soft_acc = train_lookup(softmax_weights, seed)
    st_losses, _, _, st_acc = train_lookup(straight_through, seed)
    last = lambda curve: sum(curve[-20:]) / 20
    return {"line_additive_acc": acc["additive"], "line_bilinear_acc": acc["bilinear"], "line_dot_acc": acc["dot"],
            "line_ce_gap": ce["bilinear"] - ce["additive"], "line_range_ratio": spread["additive"] / spread["bilinear"],
            "line_bilinear_shrink": scorers["bilinear"].W.weight.norm().item() / W_norm_start,
            "lookup_soft_loss_ratio": last(soft_losses) / soft_losses[0],
            "lookup_hard_loss_ratio": last(hard_losses) / hard_losses[0], "lookup_soft_acc": soft_acc,
            "lookup_start_acc": start_acc, "st_acc": st_acc, "st_loss_ratio": last(st_losses) / st_losses[0]}
