"""Input validation shared by the modules: every message names the argument, the expected and the actual."""
from __future__ import annotations

import torch


def check_bool_mask(mask: torch.Tensor, name: str = "attn_mask") -> None:
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name}: expected a bool torch.Tensor (True = may attend), got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name}: expected dtype torch.bool (True = may attend), got {mask.dtype}")


def check_mask_broadcasts(mask: torch.Tensor, target: tuple, name: str = "attn_mask") -> None:
    """The mask must broadcast to ``target`` without enlarging it."""
    check_bool_mask(mask, name)
    try:
        shape = torch.broadcast_shapes(mask.shape, target)
    except RuntimeError:
        shape = None
    if shape != torch.Size(target):
        raise ValueError(f"{name}: expected a shape broadcastable to {tuple(target)}, got {tuple(mask.shape)}")


def check_3d(x: torch.Tensor, name: str, width: int | None = None) -> None:
    """A ``(B, T, D)`` input with B, T >= 1 and, if given, D == width."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name}: expected shape (B, T, D), got {got}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty batch and sequence (B >= 1, T >= 1), got shape {tuple(x.shape)}")
    if width is not None and x.shape[-1] != width:
        raise ValueError(f"{name}: expected last dimension d_model={width}, got shape {tuple(x.shape)}")


def check_token_ids(ids: torch.Tensor, vocab_size: int, name: str = "ids") -> None:
    """A ``(B, T)`` integer tensor of ids in ``[0, vocab_size)`` with B, T >= 1."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"{name}: expected token ids of shape (B, T), got {got}")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.dtype.is_complex:
        raise ValueError(f"{name}: expected an integer dtype, got {ids.dtype}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty batch and sequence (B >= 1, T >= 1), got shape {tuple(ids.shape)}")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{name}: expected ids in [0, {vocab_size - 1}] (vocab_size={vocab_size}), got values in [{lo}, {hi}]")
