"""Positional encodings: the fixed sinusoidal table of Vaswani et al. (2017), learned absolute positions
and rotary positions (RoPE, Su et al. 2021).

Shapes: B batch, T sequence length, D d_model, H heads, Dh head width.
The two absolute encodings add positions to their input and take an ``offset`` (the number of
positions already processed) so that incremental decoding with a KV cache gives token ``t`` the
position ``t``. Rotary positions are not added to the input: :func:`apply_rope` rotates every query
and key inside attention, and :class:`RotaryEmbedding` holds the ``(cos, sin)`` tables. Llama 3.x
stretches RoPE's slow frequencies for long contexts (:func:`llama3_rope_frequencies`); a ``scaling``
dict in Hugging Face's ``rope_parameters`` form selects it.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional

import torch
from torch import nn

from ._checks import check_3d

__all__ = ["sinusoidal_positional_encoding", "SinusoidalPositionalEncoding", "LearnedPositionalEncoding",
           "rope_frequencies", "llama3_rope_frequencies", "rope_cos_sin", "rotate_half", "apply_rope",
           "RotaryEmbedding"]

# The keys of a Llama 3 scaling dict (Hugging Face's rope_parameters), besides "rope_type": "llama3".
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


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


def llama3_rope_frequencies(inv_freq: torch.Tensor, factor: float, low_freq_factor: float,
                            high_freq_factor: float, original_max_position_embeddings: int) -> torch.Tensor:
    r"""Llama 3.x's rescaling of RoPE's frequencies, for contexts longer than the training one.

    With wavelength :math:`\lambda_i = 2\pi / \theta_i` and the original context length :math:`L`:
    a frequency whose wavelength is shorter than :math:`L / \text{high\_freq\_factor}` (the fast
    ones, which resolve nearby positions) is kept; one whose wavelength is longer than
    :math:`L / \text{low\_freq\_factor}` is divided by ``factor`` (so its angle at position
    ``factor * L`` is the one it had at ``L``); in between, it interpolates smoothly, with weight
    :math:`s = (L / \lambda_i - \text{low}) / (\text{high} - \text{low})` on the kept one:
    :math:`(1 - s)\,\theta_i / \text{factor} + s\,\theta_i`. This is ``rope_type: "llama3"`` of
    Hugging Face's ``rope_parameters`` (Llama 3.1 and 3.2: ``factor`` 8 or 32, ``low_freq_factor``
    1, ``high_freq_factor`` 4, ``original_max_position_embeddings`` 8192).

    Args:
        inv_freq: the unscaled frequencies :math:`\theta_i` ``(Dh/2,)``, e.g. ``rope_frequencies(Dh, theta)``.
        factor: how much longer the new context is (> 0).
        low_freq_factor, high_freq_factor: the wavelength thresholds are ``L / low_freq_factor`` and
            ``L / high_freq_factor``; ``0 < low_freq_factor < high_freq_factor``.
        original_max_position_embeddings: ``L``, the context length the model was first trained on (>= 1).

    Returns:
        the scaled frequencies, same shape and dtype as ``inv_freq``.

    Raises:
        ValueError: a factor out of range, or ``inv_freq`` not a 1-D floating tensor.
    """
    if not isinstance(inv_freq, torch.Tensor) or inv_freq.dim() != 1 or not inv_freq.dtype.is_floating_point:
        got = f"{inv_freq.dtype} of shape {tuple(inv_freq.shape)}" if isinstance(inv_freq, torch.Tensor) else type(inv_freq).__name__
        raise ValueError(f"inv_freq: expected a 1-D floating tensor (Dh/2,), got {got}")
    if not factor > 0:
        raise ValueError(f"factor: expected > 0, got {factor!r}")
    if not 0 < low_freq_factor < high_freq_factor:
        raise ValueError(f"low_freq_factor, high_freq_factor: expected 0 < low_freq_factor < high_freq_factor, "
                         f"got {low_freq_factor!r} and {high_freq_factor!r}")
    if not original_max_position_embeddings >= 1:
        raise ValueError(f"original_max_position_embeddings: expected >= 1, got {original_max_position_embeddings!r}")
    L = original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq  # (Dh/2,)
    scaled = torch.where(wavelen > L / low_freq_factor, inv_freq / factor, inv_freq)  # slow ones divided
    smooth = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    medium = (wavelen >= L / high_freq_factor) & (wavelen <= L / low_freq_factor)
    return torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


def rope_frequencies(head_dim: int, theta: float = 10000.0, scaling: Optional[Mapping] = None) -> torch.Tensor:
    r"""RoPE's frequencies :math:`\theta_i = \text{theta}^{-2i/D_h}`, :math:`i = 0 .. D_h/2 - 1`, in float64.

    Args:
        head_dim: the head width ``Dh`` (even).
        theta: the base of the frequencies (> 0).
        scaling: None (plain RoPE), or a dict in the form of Hugging Face's ``rope_parameters``:
            ``{"rope_type": "default"}`` (the same as None) or ``{"rope_type": "llama3", "factor": ..,
            "low_freq_factor": .., "high_freq_factor": .., "original_max_position_embeddings": ..}``
            (:func:`llama3_rope_frequencies`; other keys, such as ``"rope_theta"``, are ignored).

    Returns:
        float64 ``(Dh/2,)``.

    Raises:
        ValueError: an odd ``head_dim``, ``theta <= 0``, or a ``scaling`` of another type or without its keys.
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim: expected an even number >= 2, got {head_dim}")
    if not theta > 0:
        raise ValueError(f"theta: expected > 0, got {theta}")
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (Dh/2,)
    if scaling is None:
        return inv_freq
    if not isinstance(scaling, Mapping):
        raise ValueError(f"scaling: expected None or a dict with 'rope_type', got {type(scaling).__name__}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind != "llama3":
        raise ValueError(f"scaling: expected rope_type 'default' or 'llama3', got {kind!r}")
    missing = [k for k in LLAMA3_KEYS if k not in scaling]
    if missing:
        raise ValueError(f"scaling: expected the keys {list(LLAMA3_KEYS)} for rope_type 'llama3', missing {missing}")
    return llama3_rope_frequencies(inv_freq, *(scaling[k] for k in LLAMA3_KEYS))


def rope_cos_sin(positions, head_dim: int, theta: float = 10000.0, scaling: Optional[Mapping] = None):
    r"""The rotation tables of RoPE for the given positions, in the half-split layout.

    Frequency :math:`\theta_i = \text{theta}^{-2i/D_h}`, :math:`i = 0 .. D_h/2 - 1` (rescaled as
    ``scaling`` says, :func:`rope_frequencies`), and angle :math:`p\,\theta_i` for position
    :math:`p`. Column ``i`` and column ``i + Dh/2`` hold the same angle: dimension ``i`` is paired
    with dimension ``i + Dh/2`` (Hugging Face's Llama and GPT-NeoX convention), not with ``i + 1`` as
    in the sinusoidal table. The two layouts differ by a fixed permutation of the head dimensions.
    Angles are computed in float64, then rounded to float32.

    Args:
        positions: an int ``T`` (positions ``0 .. T - 1``) or a 1-D tensor of positions.
        head_dim: the head width ``Dh`` (even).
        theta: the base of the frequencies.
        scaling: None, or Llama 3's frequency scaling as in :func:`rope_frequencies`.

    Returns:
        ``(cos, sin)``, each float32 ``(T, Dh)``.

    Shape:
        positions ``(T,)`` -> cos, sin ``(T, Dh)``.
    """
    inv_freq = rope_frequencies(head_dim, theta, scaling)  # checks head_dim, theta and scaling
    if isinstance(positions, int):
        if positions < 1:
            raise ValueError(f"positions: expected a length >= 1, got {positions}")
        positions = torch.arange(positions)
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1:
        raise ValueError(f"positions: expected an int or a 1-D tensor, got {positions!r}")
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
        scaling: None, or Llama 3's frequency scaling (a dict, as in :func:`rope_frequencies`).

    ``forward(length, offset=0)`` returns ``(cos, sin)`` for the positions ``offset .. offset + length - 1``;
    positions past ``max_len`` raise ``ValueError``.

    Shape:
        cos, sin ``(length, Dh)`` each.
    """

    def __init__(self, head_dim: int, max_len: int = 512, theta: float = 10000.0, scaling: Optional[Mapping] = None):
        super().__init__()
        self.head_dim, self.max_len, self.theta = head_dim, max_len, theta
        self.scaling = dict(scaling) if scaling is not None else None
        cos, sin = rope_cos_sin(max_len, head_dim, theta, self.scaling)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, length: int, offset: int = 0):
        if offset < 0 or offset + length > self.max_len:
            raise ValueError(f"length: expected positions offset + length <= max_len={self.max_len}, "
                             f"got offset={offset}, length={length} (raise max_len)")
        return self.cos[offset:offset + length], self.sin[offset:offset + length]
