"""Chapter 4 (self-attention), "What a trained layer attends to": the cells of ``partner_task`` and
``PartnerAttention`` and the cell that trains the layer and measures where its weights go.

Recipe as in the chapter: width 32, 300 Adam steps (lr 1e-2) on batches of 64 fresh sequences from the
generator seeded 0 (here ``seed``), initial weights from tfmini.set_seed(0) (here ``seed``); 1,000
validation sequences from the generator seed 1001. The example drawn in the chapter is the first
validation sequence.
"""
import torch
import torch.nn.functional as F
from torch import nn

import tfmini

N_LETTERS, N_DIGITS, PAIRS = 8, 10, 4
BARS = {"val_acc": (">=", 0.95), "partner_mean": (">=", 0.9), "example_min": (">=", 0.5)}


def partner_task(n, generator):
    letters = torch.rand(n, N_LETTERS, generator=generator).argsort(-1)[:, :PAIRS]
    symbols = torch.cat([letters, letters + N_LETTERS], dim=1)
    order = torch.rand(n, 2 * PAIRS, generator=generator).argsort(-1)
    symbols = symbols.gather(1, order)
    digits = torch.randint(N_DIGITS, (n, 2 * PAIRS), generator=generator)
    other_case = (symbols + N_LETTERS) % (2 * N_LETTERS)
    partner = (symbols[:, None, :] == other_case[:, :, None]).int().argmax(-1)
    return symbols, digits, digits.gather(1, partner), partner


class PartnerAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.letter, self.digit = nn.Embedding(2 * N_LETTERS, d), nn.Embedding(N_DIGITS, d)
        self.W_Q, self.W_K, self.W_V = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.out = nn.Linear(d, N_DIGITS)

    def forward(self, symbols, digits):
        x = self.letter(symbols) + self.digit(digits)
        z, weights = tfmini.attention.scaled_dot_product_attention(self.W_Q(x), self.W_K(x), self.W_V(x))
        return self.out(z), weights


def run(seed: int) -> dict:
    tfmini.set_seed(seed)
    model = PartnerAttention(32)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(300):
        symbols, digits, label, _ = partner_task(64, generator)
        loss = F.cross_entropy(model(symbols, digits)[0].flatten(0, 1), label.flatten())
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    symbols, digits, label, partner = partner_task(1000, torch.Generator().manual_seed(1001))
    with torch.no_grad():
        logits, weights = model(symbols, digits)
    on_partner = weights.gather(-1, partner[..., None])[..., 0]
    return {"val_acc": (logits.argmax(-1) == label).float().mean().item(),
            "partner_mean": on_partner.mean().item(), "example_min": on_partner[0].min().item()}
