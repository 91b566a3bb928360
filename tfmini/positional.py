"""Positional encodings: the fixed sinusoidal table of Vaswani et al. (2017) and learned absolute positions.

Shapes: B batch, T sequence length, D d_model.
Both modules add positions to their input and take an ``offset`` (the number of positions already
processed) so that incremental decoding with a KV cache gives token ``t`` the position ``t``.
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_3d

__all__ = ["sinusoidal_positional_encoding", "SinusoidalPositionalEncoding", "LearnedPositionalEncoding"]


def sinusoidal_positional_encoding(max_len: int, d_model: int) -> torch.Tensor:
    r"""The sinusoidal table, eq. (16) of the lecture notes.

    .. math::
        PE_{p, 2i} = \sin\!\left(p / 10000^{2i/d}\right), \quad
        PE_{p, 2i+1} = \cos\!\left(p / 10000^{2i/d}\right)

    Args:
        max_len: number of positions ``p = 0 .. max_len - 1``.
        d_model: width ``d`` (even).

    Returns:
        float32 ``(max_len, d_model)``.

    Shape:
        ``(max_len, d_model)``: row ``p`` is the encoding of position ``p``.
    """
    if max_len < 1:
        raise ValueError(f"max_len: expected >= 1, got {max_len}")
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model: expected an even number >= 2, got {d_model}")
    p = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angle = p / 10000.0 ** (two_i / d_model)  # (max_len, D/2)
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


def _check_length(x: torch.Tensor, offset: int, max_len: int, d_model: int) -> None:
    check_3d(x, "x", d_model)
    if offset < 0 or offset + x.shape[1] > max_len:
        raise ValueError(
            f"x: expected positions offset + T <= max_len={max_len}, got offset={offset}, T={x.shape[1]} "
            f"(a sequence longer than the positional table; raise max_len)"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table (a non-persistent buffer) to its input, then dropout.

    Args:
        d_model: width ``D`` (even).
        max_len: number of positions in the table.
        dropout: dropout after adding the positions (training only).

    ``forward(x, offset=0)`` gives ``x[:, t]`` the position ``offset + t``.

    Shape:
        x ``(B, T, D)`` -> ``(B, T, D)``; requires ``offset + T <= max_len``.
    """

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_length(x, offset, self.max_len, self.d_model)
        return self.drop(x + self.pe[offset:offset + x.shape[1]].to(x.dtype))


class LearnedPositionalEncoding(nn.Module):
    """Adds a learned embedding per absolute position (as in BERT and GPT-2), then dropout.

    Positions ``>= max_len`` have no vector: such inputs raise ``ValueError``.

    Args:
        d_model: width ``D``.
        max_len: number of positions that get a vector.
        dropout: dropout after adding the positions (training only).

    ``forward(x, offset=0)`` gives ``x[:, t]`` the position ``offset + t``.

    Shape:
        x ``(B, T, D)`` -> ``(B, T, D)``.
    """

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_length(x, offset, self.max_len, self.d_model)
        positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        return self.drop(x + self.embedding(positions).to(x.dtype))
