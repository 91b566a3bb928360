"""The training loss: next-token cross-entropy over the non-pad targets of either kind of batch.

Batches are what :class:`tfmini.data.Batches` yields: ``(src (B, S), tgt (B, T))`` for an
encoder-decoder (``tgt`` = BOS ... EOS; teacher forcing feeds ``tgt[:, :-1]`` and predicts
``tgt[:, 1:]``) or ``ids (B, T)`` for a language model (predict ``ids[:, 1:]`` from ``ids[:, :-1]``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["batch_loss"]


def batch_loss(model: nn.Module, batch, pad_id: int = 0, label_smoothing: float = 0.0,
               reduction: str = "mean") -> torch.Tensor:
    """Next-token cross-entropy over non-pad targets, for either batch kind (see module docstring).

    Args:
        model: an encoder-decoder (called as ``model(src, tgt_in)``) or a language model (``model(ids)``).
        batch: ``(src (B, S), tgt (B, T))`` or ``ids (B, T)``.
        pad_id: targets equal to it are not scored.
        label_smoothing: the amount ε of label smoothing (0: one-hot targets).
        reduction: ``"mean"`` (over the non-pad target tokens) or ``"sum"``.

    Returns:
        a scalar tensor.

    Shape:
        logits ``(B, T - 1, V)`` against targets ``(B, T - 1)`` -> ``()``.
    """
    if isinstance(batch, (tuple, list)):
        src, tgt = batch
        logits, gold = model(src, tgt[:, :-1]), tgt[:, 1:]
    else:
        logits, gold = model(batch[:, :-1]), batch[:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), gold.reshape(-1),
                           ignore_index=pad_id, label_smoothing=label_smoothing, reduction=reduction)


def _target_count(batch, pad_id: int) -> torch.Tensor:
    gold = batch[1][:, 1:] if isinstance(batch, (tuple, list)) else batch[:, 1:]
    return (gold != pad_id).sum().float()
