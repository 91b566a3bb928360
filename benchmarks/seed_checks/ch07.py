"""Chapter 7: the 48-layer residual experiment (``Sublayer``, ``input_gradients``), post-LN / pre-LN
gradients at initialisation (``Tagger``, ``twins``, ``layer_gradients``), the three trainings (the chapter
runs them for seeds 0, 1 and 2; the warm-up run warms up and then keeps the rate constant) and the
depth sweep of exercise 2's solution."""

import math

import torch
from torch import nn
import tfmini

BARS = {"ratio_x": (">=", 1e3), "ratio_w": (">=", 1e3), "g_ratio_last": (">=", 1.5),
        "g_ratio_last_minus_first": (">=", 0.0), "pre_reached": ("<=", 200), "post_minus_pre_reached": (">=", 1),
        "log_ratio_48_minus_6": (">=", 0.0)}


class Sublayer(nn.Module):
    def __init__(self, kind, d, num_heads=2):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.f = tfmini.MultiHeadAttention(d, num_heads) if kind == "attention" else tfmini.FeedForward(d, 4 * d)

    def forward(self, x):
        h = self.norm(x)
        return self.f(h, h, h)[0] if isinstance(self.f, tfmini.MultiHeadAttention) else self.f(h)


def input_gradient(stack, x, upstream, residual):  # norms of dL/dx and of dL/dW^Q of the first sub-layer
    h = x0 = x.clone().requires_grad_()
    for f in stack:
        h = h + f(h) if residual else f(h)
    return [g.norm().item() for g in torch.autograd.grad(h, (x0, stack[0].f.q_proj.weight), upstream)]


class Tagger(nn.Module):
    def __init__(self, vocab_size, num_layers, norm_first):
        super().__init__()
        self.encoder = tfmini.Encoder(tfmini.TransformerConfig(
            vocab_size, d_model=32, num_heads=4, num_encoder_layers=num_layers, d_ff=128, dropout=0.0, max_len=8,
            norm_first=norm_first))
        self.head = nn.Linear(32, vocab_size)

    def forward(self, src):
        return self.head(self.encoder(src)[0])  # (B, S, V)


def run(seed, steps=200, batch_size=64):
    torch.set_num_threads(1)
    tfmini.set_seed(seed)
    deep = nn.ModuleList(Sublayer(kind, 16) for _ in range(48) for kind in ("attention", "feed-forward"))
    x, G = torch.randn(4, 8, 16), torch.randn(4, 8, 16)
    (x_res, w_res), (x_plain, w_plain) = (input_gradient(deep, x, G, res) for res in (True, False))
    pairs = tfmini.reverse_task(steps * batch_size, min_len=8, max_len=8, seed=seed)
    vocab = tfmini.Vocab.build(src for src, _ in pairs)
    src, tgt = (torch.tensor([vocab.encode(p[i]) for p in pairs]) for i in (0, 1))

    def twins(n):  # same weights; pre-LN's final LayerNorm starts as the identity
        post, pre = Tagger(len(vocab), n, False), Tagger(len(vocab), n, True)
        pre.load_state_dict(post.state_dict(), strict=False)
        return post, pre

    def loss_fn(model, batch):
        return nn.functional.cross_entropy(model(batch[0]).flatten(0, 1), batch[1].flatten())

    def grads(model):
        model.zero_grad(set_to_none=True)
        loss_fn(model, (src[:batch_size], tgt[:batch_size])).backward()
        return torch.stack([torch.cat([p.grad.flatten() for p in m.parameters()]).norm() for m in model.encoder.layers])

    tfmini.set_seed(seed)
    ratio = torch.stack([grads(post) / grads(pre) for post, pre in (twins(24) for _ in range(4))]).mean(0)
    tfmini.set_seed(seed)
    (post6, pre6), warm6 = twins(6), twins(6)[0]
    warm6.load_state_dict(post6.state_dict())  # post-LN with warm-up, from post6's weights
    data = tfmini.Batches(list(zip(src.tolist(), tgt.tolist())), batch_size=batch_size, shuffle=False)
    reached = {}
    for name, model, warmup in (("post", post6, 0), ("pre", pre6, 0), ("warm", warm6, 100)):
        # the warm-up run: linear warm-up, then the constant rate (a cosine whose horizon is never reached)
        schedule = dict(schedule="cosine", total_steps=10**9) if warmup else {}
        losses = torch.tensor(tfmini.fit(model, data, steps=steps, lr=1e-2, warmup_steps=warmup, loss_fn=loss_fn,
                                         log_every=1, seed=seed, device="cpu", progress=False, **schedule).loss)
        below = (losses.unfold(0, 20, 1).mean(-1) < 0.1).nonzero()
        reached[name] = int(below[0]) + 20 if len(below) else float("inf")
    tfmini.set_seed(seed)  # exercise 2: log10 of the residual / plain input-gradient ratio, 48 against 6 layers
    log_ratio = {}
    for n in (6, 12, 24, 48):
        stack = nn.ModuleList(Sublayer(kind, 16) for _ in range(n) for kind in ("attention", "feed-forward"))
        x_n, G_n = torch.randn(4, 8, 16), torch.randn(4, 8, 16)
        log_ratio[n] = math.log10(input_gradient(stack, x_n, G_n, True)[0] / input_gradient(stack, x_n, G_n, False)[0])
    return {"ratio_x": x_res / x_plain, "ratio_w": w_res / w_plain, "g_ratio_last": ratio[-1].item(),
            "log_ratio_48_minus_6": log_ratio[48] - log_ratio[6],
            "g_ratio_last_minus_first": (ratio[-1] - ratio[0]).item(), "post_minus_pre_reached": reached["post"]
            - reached["pre"], **{f"{name}_reached": step for name, step in reached.items()}}
