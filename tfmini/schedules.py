"""Learning-rate schedules: the warm-up schedule of Vaswani et al. (2017) and the shapes :func:`tfmini.fit <tfmini.train.fit>` uses."""
from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = ["transformer_lr", "warmup_schedule"]


def transformer_lr(step: int, d_model: int, warmup_steps: int = 4000) -> float:
    r"""The learning rate of Vaswani et al. (2017), eq. (3): :math:`d^{-0.5}\min(s^{-0.5}, s\,w^{-1.5})`, steps from 1.

    Args:
        step: the optimiser step :math:`s` (values below 1 count as 1).
        d_model: the model width :math:`d`.
        warmup_steps: the number of warm-up steps :math:`w`.

    Returns:
        the learning rate at that step.
    """
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def warmup_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, schedule: str = "inverse_sqrt",
                    total_steps: Optional[int] = None) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to the optimizer's learning rate over ``warmup_steps``, then inverse-square-root decay
    (the shape of :func:`transformer_lr`, peaking at the given rate). ``warmup_steps=0``: constant rate.

    Args:
        optimizer: its learning rate is the peak rate.
        warmup_steps: length of the linear warm-up, in optimiser steps.
        schedule: ``"inverse_sqrt"`` (the default, as above) or ``"cosine"``: after the warm-up, a
            half cosine from the peak rate down to 0 at ``total_steps`` (and 0 after it).
        total_steps: the step at which the cosine reaches 0; required with ``schedule="cosine"``.

    Returns:
        a ``LambdaLR`` scheduler; call its ``step()`` after every optimiser step.
    """
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps: expected >= 0, got {warmup_steps}")
    if schedule not in ("inverse_sqrt", "cosine"):
        raise ValueError(f"schedule: expected 'inverse_sqrt' or 'cosine', got {schedule!r}")
    if schedule == "cosine":
        if total_steps is None or total_steps <= warmup_steps:
            raise ValueError(f"total_steps: expected an int > warmup_steps={warmup_steps} with schedule='cosine', "
                             f"got {total_steps}")

        def cosine(s: int) -> float:
            if s + 1 <= warmup_steps:
                return (s + 1) / warmup_steps
            done = min(1.0, (s + 1 - warmup_steps) / (total_steps - warmup_steps))
            return 0.5 * (1.0 + math.cos(math.pi * done))
        return torch.optim.lr_scheduler.LambdaLR(optimizer, cosine)
    if warmup_steps == 0:
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup_steps, math.sqrt(warmup_steps / (s + 1))))
