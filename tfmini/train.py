"""Training: a small, seeded, device-aware fit loop and what it records.

One concept per module: the learning-rate schedules are in :mod:`tfmini.schedules`, the loss in
:mod:`tfmini.losses`, evaluation by decoding in :mod:`tfmini.evaluation`, checkpoints in
:mod:`tfmini.checkpoint`, the data-parallel loss in :mod:`tfmini.distributed` and the progress line
in :mod:`tfmini.notebook`. Their functions are also importable from here, as before.

Batches are what :class:`tfmini.data.Batches` yields: ``(src (B, S), tgt (B, T))`` for an
encoder-decoder or ``ids (B, T)`` for a language model (see :mod:`tfmini.losses`).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from . import distributed
from .losses import batch_loss
from .notebook import _Progress
from .schedules import warmup_schedule

__all__ = ["default_device", "set_seed", "History", "param_groups", "fit"]


def default_device() -> torch.device:
    """CUDA if available, else CPU.

    Returns:
        ``torch.device("cuda")`` or ``torch.device("cpu")``.
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and PyTorch (all devices).

    Args:
        seed: the seed of all three generators.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class History:
    """What :func:`fit` measured: per logged step the loss, learning rate and elapsed seconds, and the evaluations.

    Attributes:
        step, loss, lr, time: one entry per logged step: the step number, the training loss, the
            learning rate that step used and the seconds since training started.
        evals: one dict per evaluation, the result of ``eval_fn`` with ``step`` and ``time`` added.
        loaded: True when :func:`~tfmini.checkpoint.fit_or_load` took the history from a checkpoint.
    """

    step: List[int] = field(default_factory=list)
    loss: List[float] = field(default_factory=list)
    lr: List[float] = field(default_factory=list)
    time: List[float] = field(default_factory=list)
    evals: List[Dict[str, float]] = field(default_factory=list)
    loaded: bool = False  # True when fit_or_load took it from a checkpoint

    @property
    def seconds(self) -> float:
        """Training wall-clock time in seconds."""
        return self.time[-1] if self.time else 0.0


def _rows(batch) -> int:
    """The number of examples (rows) in a batch: a tensor ``(B, ...)`` or a tuple of them."""
    return (batch[0] if isinstance(batch, (tuple, list)) else batch).shape[0]


def _to(batch, device):
    return tuple(x.to(device) for x in batch) if isinstance(batch, (tuple, list)) else batch.to(device)


def param_groups(model: nn.Module, weight_decay: float) -> list:
    """AdamW's parameter groups: weight decay on the weight matrices only.

    Norm gains, biases and embedding tables (and an output layer tied to an embedding) get no decay:
    pulling a gain or a bias towards 0 does not make a layer simpler, and a token that is rare in the
    data would have its embedding decayed towards 0 at every step it is absent. This is the usual split
    (minGPT, Hugging Face's Trainer for norms and biases).

    Args:
        model: the model whose trainable parameters are split.
        weight_decay: the decay of the matrices.

    Returns:
        ``[{"params": matrices, "weight_decay": weight_decay}, {"params": the rest, "weight_decay": 0.0}]``,
        leaving out an empty group; each parameter appears once, in the model's order.
    """
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, rest = [], []
    for p in model.parameters():  # shared (tied) parameters come once
        if p.requires_grad:
            (decay if p.dim() >= 2 and id(p) not in embeddings else rest).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def fit(model: nn.Module, batches, *, steps: Optional[int] = None, epochs: Optional[int] = None,
        lr: float = 1e-3, warmup_steps: int = 0, weight_decay: float = 0.0, clip_norm: Optional[float] = 1.0,
        betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        label_smoothing: float = 0.0, pad_id: int = 0, seed: int = 0, device=None,
        eval_fn: Optional[Callable[[nn.Module], Dict[str, float]]] = None, eval_every: int = 100,
        stop_fn: Optional[Callable[[Dict[str, float]], bool]] = None, time_limit: Optional[float] = None,
        log_every: int = 10, progress: bool = True,
        loss_fn: Optional[Callable[[nn.Module, object], torch.Tensor]] = None,
        schedule: str = "inverse_sqrt", total_steps: Optional[int] = None) -> History:
    """Train with AdamW, warm-up, gradient clipping and (optionally) label smoothing.

    Args:
        model: the model to train; it ends in eval mode.
        batches: a re-iterable of batches (e.g. :class:`tfmini.data.Batches`).
        steps / epochs: stop after this many optimiser steps / passes (give one or both).
        lr: the peak learning rate of AdamW.
        warmup_steps: steps of linear warm-up (see :func:`~tfmini.schedules.warmup_schedule`).
        weight_decay: AdamW's decoupled weight decay, on the weight matrices only (:func:`param_groups`).
        clip_norm: clip the gradient norm to this value (None: no clipping).
        betas, eps: AdamW's moment decays and denominator term; PyTorch's defaults. Vaswani et al.
            used (0.9, 0.98) and 1e-9, with no clipping and no weight decay.
        label_smoothing, pad_id: passed to :func:`~tfmini.losses.batch_loss`.
        seed: seeds everything (:func:`set_seed`) before training.
        device: where to train (default: :func:`default_device`).
        eval_every: steps between evaluations.
        log_every: steps between entries of the history.
        eval_fn: called every ``eval_every`` steps and at the end (model in eval mode); its dict is
            recorded in ``history.evals`` with ``step`` and ``time``.
        stop_fn: stop early when it returns True for an evaluation (e.g. accuracy reached 1.0).
        time_limit: stop after this many seconds of training.
        progress: show a live status line (never left in a notebook's stored output).
        loss_fn: ``loss_fn(model, batch) -> scalar loss`` for models that are not next-token
            predictors (e.g. a tagger); default: :func:`~tfmini.losses.batch_loss` with ``pad_id`` and ``label_smoothing``.
            It may also return ``(loss, count)``, its mean over ``count`` scored tokens, which
            data-parallel training needs to weight the ranks by their tokens (see below).
        schedule, total_steps: the learning-rate shape after the warm-up (see :func:`~tfmini.schedules.warmup_schedule`);
            with ``schedule="cosine"``, ``total_steps`` defaults to ``steps``, or without ``steps`` to
            ``epochs * len(batches)``.

    Under ``torchrun`` (after :func:`tfmini.distributed.init_from_env`), ``fit`` trains data-parallel
    with :class:`~torch.nn.parallel.DistributedDataParallel`: every rank draws the same global batch
    from ``batches`` and trains on its slice (:func:`tfmini.distributed.shard`). The default loss is
    each rank's sum of token losses divided by the global number of target tokens (times the number
    of ranks, which DDP's gradient average divides out), so a step equals a single-process step on the
    whole global batch. A custom ``loss_fn`` that returns ``(loss, count)`` is scaled the same way, by
    its tokens: ``loss * count`` over the global count. One that returns only its mean is weighted
    by the rank's share of the batch's rows, which equals the token weighting when every row has as
    many scored tokens (not, for example, with padding or random masking: return the count then). It
    receives the DDP wrapper, whose ``.module`` is ``model``. Only rank 0 shows
    progress; the history is the same on every rank.

    Returns:
        a :class:`History`.
    """
    if steps is None and epochs is None:
        raise ValueError("steps, epochs: expected at least one of them, got neither")
    parallel, rank, world = distributed.is_distributed(), distributed.rank(), distributed.world_size()
    # Each rank its own random stream (dropout differs between the ranks' slices, as it would between
    # the rows of one big batch); rank 0, and a single process, use ``seed`` itself.
    set_seed(seed + rank)
    if device is not None:
        device = torch.device(device)
    else:
        device = distributed.local_device() if parallel else default_device()
    model.to(device)
    net = model
    if parallel:
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    if steps is None and not hasattr(batches, "__len__"):
        raise ValueError(f"batches: with epochs and no steps, expected batches with a length (such as "
                         f"tfmini.Batches or a DataLoader), got {type(batches).__name__}")
    total = steps if steps is not None else epochs * len(batches)
    opt = torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas, eps=eps)
    sched = warmup_schedule(opt, warmup_steps, schedule, total_steps if total_steps is not None else total)
    hist, bar = History(), _Progress(progress and rank == 0)
    step, epoch, start, stop = 0, 0, time.perf_counter(), False

    def run_eval():
        model.eval()
        metrics = dict(eval_fn(model))
        model.train()
        hist.evals.append({"step": step, "time": time.perf_counter() - start, **metrics})
        return stop_fn is not None and stop_fn(metrics)

    model.train()
    try:
        while not stop and (epochs is None or epoch < epochs):
            before = step
            for batch in batches:
                batch = _to(batch, device)
                if parallel:
                    part = distributed.shard(batch, rank, world)
                    rows = (_rows(part), _rows(batch))
                    loss, logged = distributed._data_parallel_loss(net, part, world, pad_id, label_smoothing,
                                                                   loss_fn, rows)
                elif loss_fn is not None:
                    loss = distributed._custom_loss(loss_fn(model, batch))[0]
                    logged = loss
                else:
                    loss = batch_loss(model, batch, pad_id, label_smoothing)
                    logged = loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if clip_norm is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
                used_lr = opt.param_groups[0]["lr"]  # the rate of this step; sched.step() sets the next one
                opt.step()
                sched.step()
                step += 1
                elapsed = time.perf_counter() - start
                if step % log_every == 0 or step == total:
                    hist.step.append(step)
                    hist.loss.append(logged.item())
                    hist.lr.append(used_lr)
                    hist.time.append(elapsed)
                    bar.show(f"step {step}/{total}  loss {logged.item():.4f}  {elapsed:.1f}s")
                if eval_fn is not None and step % eval_every == 0 and run_eval():
                    stop = True
                if time_limit is not None and elapsed >= time_limit:
                    stop = True
                if parallel and (time_limit is not None or stop_fn is not None):
                    flag = torch.tensor([float(stop)], device=device)
                    torch.distributed.broadcast(flag, src=0)  # every rank stops at rank 0's step
                    stop = bool(flag.item())
                if stop or step == steps:
                    stop = True
                    break
            if step == before:     # a one-shot iterator that is used up, or no data: another pass never ends
                raise ValueError(f"batches: a pass over them gave no batch after {step} steps (an exhausted "
                                 f"iterator or an empty dataset); expected a re-iterable such as tfmini.Batches")
            epoch += 1
        if eval_fn is not None and (not hist.evals or hist.evals[-1]["step"] != step):
            run_eval()
    finally:
        bar.close()
        model.eval()
    return hist


# What lived in this module before it was split, importable from here as before (tfmini.train.evaluate...).
from .evaluation import evaluate, evaluate_by_length, sequence_accuracy, token_accuracy  # noqa: E402,F401
from .schedules import transformer_lr  # noqa: E402,F401  (batch_loss and warmup_schedule: imported above)


def __getattr__(name: str):
    """``tfmini.train.fit_or_load``, looked up when asked for: :mod:`tfmini.checkpoint` imports this
    module, so importing it here would make the two modules import each other."""
    if name == "fit_or_load":
        from .checkpoint import fit_or_load
        return fit_or_load
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
