"""Positional encodings: the fixed sinusoidal table of Vaswani et al. (2017), learned absolute positions
and rotary positions (RoPE, Su et al. 2021).

Shapes: B batch, T sequence length, D d_model, H heads, Dh head width.
The two absolute encodings add positions to their input and take an ``offset`` (the number of
positions already processed) so that incremental decoding with a KV cache gives token ``t`` the
position ``t``. Rotary positions are not added to the input: :func:`apply_rope` rotates every query
and key inside attention, and :class:`RotaryEmbedding` holds the ``(cos, sin)`` tables.
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_3d

__all__ = ["sinusoidal_positional_encoding", "SinusoidalPositionalEncoding", "LearnedPositionalEncoding",
           "rope_cos_sin", "rotate_half", "apply_rope", "RotaryEmbedding"]


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


def rope_cos_sin(positions, head_dim: int, theta: float = 10000.0):
    r"""The rotation tables of RoPE for the given positions, in the half-split layout.

    Frequency :math:`\theta_i = \text{theta}^{-2i/D_h}`, :math:`i = 0 .. D_h/2 - 1`, and angle
    :math:`p\,\theta_i` for position :math:`p`. Column ``i`` and column ``i + Dh/2`` hold the same
    angle: dimension ``i`` is paired with dimension ``i + Dh/2`` (Hugging Face's Llama and GPT-NeoX
    convention), not with ``i + 1`` as in the sinusoidal table. The two layouts differ by a fixed
    permutation of the head dimensions. Angles are computed in float64, then rounded to float32.

    Args:
        positions: an int ``T`` (positions ``0 .. T - 1``) or a 1-D tensor of positions.
        head_dim: the head width ``Dh`` (even).
        theta: the base of the frequencies.

    Returns:
        ``(cos, sin)``, each float32 ``(T, Dh)``.

    Shape:
        positions ``(T,)`` -> cos, sin ``(T, Dh)``.
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim: expected an even number >= 2, got {head_dim}")
    if not theta > 0:
        raise ValueError(f"theta: expected > 0, got {theta}")
    if isinstance(positions, int):
        if positions < 1:
            raise ValueError(f"positions: expected a length >= 1, got {positions}")
        positions = torch.arange(positions)
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1:
        raise ValueError(f"positions: expected an int or a 1-D tensor, got {positions!r}")
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (Dh/2,)
    angle = positions.to(torch.float64)[:, None] * inv_freq.to(positions.device)  # (T, Dh/2)
    angle = torch.cat([angle, angle], dim=-1)  # (T, Dh)
    return angle.cos().float(), angle.sin().float()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """A quarter turn of every pair of dimensions ``(i, i + Dh/2)``: ``(x1, x2) -> (-x2, x1)`` over the two halves.

    Args:
        x: ``(..., Dh)`` with ``Dh`` even.

    Returns:
        the turned tensor, same shape.

    Shape:
        ``(..., Dh)`` -> ``(..., Dh)``.
    """
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    r"""Rotate queries or keys by their positions' angles (RoPE).

    .. math:: \mathrm{RoPE}(\mathbf x, p) = \mathbf x \odot \cos(p\theta) + \mathrm{rotate\_half}(\mathbf x) \odot \sin(p\theta)

    Each pair of dimensions ``(i, i + Dh/2)`` turns by the angle :math:`p\,\theta_i`, so the score of
    a rotated query at position ``m`` and a rotated key at position ``n`` depends on the positions
    only through ``m - n``.

    Args:
        x: ``(..., T, Dh)`` queries or keys.
        cos, sin: ``(T, Dh)`` tables from :func:`rope_cos_sin` for the ``T`` positions of ``x``.

    Returns:
        the rotated ``x``, same shape and dtype.

    Shape:
        x ``(..., T, Dh)``, cos and sin ``(T, Dh)`` -> ``(..., T, Dh)``.
    """
    if cos.shape != sin.shape or cos.dim() != 2 or x.dim() < 2 or tuple(x.shape[-2:]) != tuple(cos.shape):
        raise ValueError(f"cos, sin: expected (T, Dh) = {tuple(x.shape[-2:])} to match x {tuple(x.shape)}, "
                         f"got cos {tuple(cos.shape)}, sin {tuple(sin.shape)}")
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    """The ``(cos, sin)`` tables of RoPE for positions ``0 .. max_len - 1`` (non-persistent buffers).

    Args:
        head_dim: the head width ``Dh`` (even).
        max_len: number of positions in the tables.
        theta: the base of the frequencies.

    ``forward(length, offset=0)`` returns ``(cos, sin)`` for the positions ``offset .. offset + length - 1``;
    positions past ``max_len`` raise ``ValueError``.

    Shape:
        cos, sin ``(length, Dh)`` each.
    """

    def __init__(self, head_dim: int, max_len: int = 512, theta: float = 10000.0):
        super().__init__()
        self.head_dim, self.max_len, self.theta = head_dim, max_len, theta
        cos, sin = rope_cos_sin(max_len, head_dim, theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, length: int, offset: int = 0):
        if offset < 0 or offset + length > self.max_len:
            raise ValueError(f"length: expected positions offset + length <= max_len={self.max_len}, "
                             f"got offset={offset}, length={length} (raise max_len)")
        return self.cos[offset:offset + length], self.sin[offset:offset + length]
