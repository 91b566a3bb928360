"""Attention masks.

Convention (the one of ``F.scaled_dot_product_attention``): a mask is a **bool** tensor and
``True`` means *may attend*. Masks broadcast against attention scores of shape ``(B, H, T, S)``
and are combined with ``&``. ``nn.MultiheadAttention`` uses the opposite polarity (True = ignore);
invert with ``~mask`` when handing a tfmini mask to it.

Shapes: B batch, T query (target) length, S key (source) length, H heads.
"""
from __future__ import annotations

from typing import Optional

import torch

from ._checks import check_bool_mask


def causal_mask(T: int, S: Optional[int] = None, *, device=None) -> torch.Tensor:
    """Mask that lets query ``t`` see keys ``0..t`` and nothing later.

    Args:
        T: number of queries.
        S: number of keys (default ``T``). With ``S > T`` the queries are taken to be the *last*
            ``T`` positions of the key sequence, which is what incremental decoding with a KV cache
            needs: query ``t`` sees keys ``0 .. S - T + t``.
        device: where to create the mask (default: the CPU).

    Returns:
        bool ``(T, S)``, True on and below the (shifted) diagonal.
    """
    S = T if S is None else S
    if T < 1 or S < T:
        raise ValueError(f"causal_mask: expected 1 <= T <= S, got T={T}, S={S}")
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)


def mask_from_lengths(lengths: torch.Tensor, S: Optional[int] = None) -> torch.Tensor:
    """Mask of real (non-padding) positions from sequence lengths.

    Args:
        lengths: ``(B,)`` integer lengths.
        S: the padded length (default ``lengths.max()``).

    Returns:
        bool ``(B, S)``, True where ``position < length``.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.numel() == 0 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths: expected a non-empty 1-D integer tensor, got shape {tuple(lengths.shape)} and dtype {lengths.dtype}"
        )
    S = int(lengths.max()) if S is None else S
    if (lengths < 0).any() or (lengths > S).any():
        raise ValueError(f"lengths: expected values in [0, {S}], got {lengths.tolist()}")
    return torch.arange(S, device=lengths.device) < lengths[:, None]


def mask_from_ids(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mask of real (non-padding) positions from token ids: True where ``ids != pad_id``.

    Args:
        ids: ``(B, S)`` token ids.
        pad_id: the id of the padding token.

    Returns:
        bool ``(B, S)``, True at real tokens.
    """
    if ids.dim() != 2:
        raise ValueError(f"ids: expected shape (B, S), got {tuple(ids.shape)}")
    return ids != pad_id


def padding_mask(lengths: torch.Tensor, max_len: Optional[int] = None) -> torch.Tensor:
    """The former name of :func:`mask_from_lengths`, kept for old code.

    Args:
        lengths: ``(B,)`` integer lengths.
        max_len: the padded length ``S`` (default ``lengths.max()``).

    Returns:
        bool ``(B, S)``, True where ``position < length``.
    """
    return mask_from_lengths(lengths, max_len)


def pad_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The former name of :func:`mask_from_ids`, kept for old code.

    Args:
        ids: ``(B, S)`` token ids.
        pad_id: the id of the padding token.

    Returns:
        bool ``(B, S)``, True at real tokens.
    """
    return mask_from_ids(ids, pad_id)


def attention_mask(key_padding: Optional[torch.Tensor] = None,
                   causal: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
    """Combine a key-padding mask and a causal (or any ``(T, S)``) mask into one attention mask.

    Args:
        key_padding: bool ``(B, S)``, True for real keys.
        causal: bool ``(T, S)``.

    Returns:
        bool broadcastable to ``(B, H, T, S)``: ``(B, 1, 1, S)``, ``(T, S)`` or ``(B, 1, T, S)``;
        ``None`` when both are ``None``.
    """
    mask = None
    if key_padding is not None:
        check_bool_mask(key_padding, "key_padding")
        if key_padding.dim() != 2:
            raise ValueError(f"key_padding: expected shape (B, S), got {tuple(key_padding.shape)}")
        mask = key_padding[:, None, None, :]  # (B, 1, 1, S)
    if causal is not None:
        check_bool_mask(causal, "causal")
        if causal.dim() != 2:
            raise ValueError(f"causal: expected shape (T, S), got {tuple(causal.shape)}")
        if mask is not None and causal.shape[-1] != mask.shape[-1]:
            raise ValueError(
                f"causal: expected {mask.shape[-1]} keys to match key_padding, got shape {tuple(causal.shape)}"
            )
        mask = causal if mask is None else mask & causal  # (B, 1, T, S)
    return mask
