"""Chapter 5, "Heads of a trained model": the cells of ``sum_task``, ``Labeller``, ``train_labeller``,
``weight_on_neighbours``, those that train the sum model and the 2- and 1-head neighbours models, and the
hidden solution of exercise 3 (a 4-head model, and a 1-head model given 4 times the 2-head model's steps)."""

import torch
import torch.nn.functional as F
import tfmini

T, IGNORE, VAL_SEED, TEST_SEED = 10, -100, 1001, 1000
BARS = {"sum_acc": (">=", 0.99), "sum_min_side": (">=", 0.2), "sum_gap": ("<=", 0.1),
        "nb_acc": (">=", 0.999), "one_acc": ("<=", 0.9), "left_on_left": (">=", 0.5), "left_on_right": ("<=", 0.1),
        "right_on_right": (">=", 0.5), "right_on_left": ("<=", 0.1),
        "four_acc": (">=", 0.999), "four_best_left": (">=", 0.5), "four_best_right": (">=", 0.5),
        "patient_acc": (">=", 0.95), "patient_side_gap": (">=", 0.1)}


def sum_task(n, g, V=10):
    x, y = torch.randint(V, (n, T), generator=g), torch.full((n, T, 1), IGNORE)
    y[:, 1:-1, 0] = (x[:, :-2] + x[:, 2:]) % V
    return x, y


def neighbours_task(n, g, V=64):
    x, y = torch.randint(V, (n, T), generator=g), torch.full((n, T, 2), IGNORE)
    y[:, 1:-1, 0], y[:, 1:-1, 1] = x[:, :-2], x[:, 2:]
    return x, y


class Labeller(torch.nn.Module):
    def __init__(self, vocab_size, n_labels, num_heads, d_model=32):
        super().__init__()
        self.n_labels, self.vocab_size = n_labels, vocab_size
        self.embed = tfmini.TokenEmbedding(vocab_size, d_model)
        self.pos = tfmini.SinusoidalPositionalEncoding(d_model, max_len=T)
        self.layer = tfmini.EncoderLayer(d_model, num_heads, d_ff=4 * d_model, norm_first=True)
        self.out = torch.nn.Linear(d_model, n_labels * vocab_size)

    def forward(self, x, need_weights=False):
        h, w = self.layer(self.pos(self.embed(x)), need_weights=need_weights)
        return self.out(h).unflatten(-1, (self.n_labels, self.vocab_size)), w


@torch.no_grad()
def accuracy(model, x, y):
    return (model(x)[0].argmax(-1) == y)[y != IGNORE].float().mean().item()


def train(model, task, max_steps, target_acc=1.0, seed=0, lr=5e-3, batch_size=128, eval_every=25):
    g = torch.Generator().manual_seed(seed)
    x_val, y_val = task(1000, torch.Generator().manual_seed(VAL_SEED))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for step in range(1, max_steps + 1):
        x, y = task(batch_size, g)
        loss = F.cross_entropy(model(x)[0].flatten(0, -2), y.flatten(), ignore_index=IGNORE)
        opt.zero_grad(), loss.backward(), opt.step()
        if target_acc is not None and step % eval_every == 0 and accuracy(model, x_val, y_val) >= target_acc:
            break
    x_test, y_test = task(1000, torch.Generator().manual_seed(TEST_SEED))  # scored once, at the end
    return step, accuracy(model, x_test, y_test), x_val, x_test


@torch.no_grad()
def share(model, x):
    w, i = model(x, need_weights=True)[1], torch.arange(1, T - 1)
    return torch.stack([w[:, :, i, i + o].mean(dim=(0, 2)) for o in (-1, 0, 1)], dim=-1)


def run(seed):
    torch.set_num_threads(1)
    models = []
    for vocab, labels, heads in ((10, 1, 2), (64, 2, 2), (64, 2, 1), (64, 2, 4), (64, 2, 1)):
        tfmini.set_seed(seed)
        models.append(Labeller(vocab, labels, heads))
    _, sum_acc, _, x_sum = train(models[0], sum_task, 1000, 0.995, seed)
    steps, nb_acc, x_val, x_test = train(models[1], neighbours_task, 1000, 1.0, seed)
    _, one_acc, _, _ = train(models[2], neighbours_task, steps, None, seed)
    s, t = share(models[0], x_sum), share(models[1], x_test)
    left = int(share(models[1], x_val)[:, 0].argmax())  # the left head is chosen on validation data
    _, four_acc, _, _ = train(models[3], neighbours_task, 1000, 1.0, seed)
    _, patient_acc, _, _ = train(models[4], neighbours_task, 4 * steps, None, seed)
    s4, s1 = share(models[3], x_test), share(models[4], x_test)
    return {"sum_acc": sum_acc, "sum_min_side": min(s[:, 0].min(), s[:, 2].min()).item(),
            "sum_gap": (s[:, 0] - s[:, 2]).abs().max().item(), "nb_acc": nb_acc, "one_acc": one_acc,
            "left_on_left": t[left, 0].item(), "left_on_right": t[left, 2].item(),
            "right_on_right": t[1 - left, 2].item(), "right_on_left": t[1 - left, 0].item(), "nb_steps": steps,
            "four_acc": four_acc, "four_best_left": s4[:, 0].max().item(), "four_best_right": s4[:, 2].max().item(),
            "patient_acc": patient_acc, "patient_side_gap": (s1[0, 0] - s1[0, 2]).abs().item()}
