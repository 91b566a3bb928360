"""Training and evaluation: a small, seeded, device-aware fit loop and accuracy helpers.

Batches are what :class:`tfmini.data.Batches` yields: ``(src (B, S), tgt (B, T))`` for an
encoder-decoder (``tgt`` = BOS ... EOS; teacher forcing feeds ``tgt[:, :-1]`` and predicts
``tgt[:, 1:]``) or ``ids (B, T)`` for a language model (predict ``ids[:, 1:]`` from ``ids[:, :-1]``).
"""
from __future__ import annotations

import hashlib
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import distributed
from .decoding import beam_search, greedy_decode

__all__ = [
    "default_device", "set_seed", "transformer_lr", "warmup_schedule", "batch_loss", "History", "fit", "fit_or_load",
    "token_accuracy", "sequence_accuracy", "evaluate", "evaluate_by_length",
]


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


def _data_parallel_loss(net: nn.Module, batch, world: int, pad_id: int, label_smoothing: float, loss_fn):
    """This rank's loss, scaled so that DDP's gradient average is the gradient of the global-batch loss;
    and that global loss, for the log."""
    if loss_fn is not None:  # a custom loss: each rank's mean, averaged over ranks as DDP does
        loss = loss_fn(net, batch)
        logged = loss.detach().clone()
        torch.distributed.all_reduce(logged)
        return loss, logged / world
    total = batch_loss(net, batch, pad_id, label_smoothing, reduction="sum")
    stats = torch.stack([total.detach(), _target_count(batch, pad_id)])
    torch.distributed.all_reduce(stats)  # global sum of token losses, global number of target tokens
    return total * world / stats[1], stats[0] / stats[1]


@dataclass
class History:
    """What :func:`fit` measured: per logged step the loss, learning rate and elapsed seconds, and the evaluations.

    Attributes:
        step, loss, lr, time: one entry per logged step: the step number, the training loss, the
            learning rate that step used and the seconds since training started.
        evals: one dict per evaluation, the result of ``eval_fn`` with ``step`` and ``time`` added.
        loaded: True when :func:`fit_or_load` took the history from a checkpoint.
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


def _in_kernel() -> bool:
    """True inside a running Jupyter kernel (ipykernel merely being imported, e.g. by a pytest plugin, is not enough)."""
    if "ipykernel" not in sys.modules:
        return False
    from IPython import get_ipython
    return getattr(get_ipython(), "kernel", None) is not None


class _Progress:
    """A live one-line status: updated in place in a notebook and erased at the end, so a
    notebook's stored output never holds text that changes from run to run."""

    def __init__(self, enabled: bool):
        self.handle, self.enabled = None, enabled
        if enabled and _in_kernel():
            from IPython.display import display
            self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def show(self, text: str) -> None:
        if not self.enabled:
            return
        if self.handle is not None:
            self.handle.update({"text/plain": text}, raw=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.update({"text/plain": ""}, raw=True)


def _to(batch, device):
    return tuple(x.to(device) for x in batch) if isinstance(batch, (tuple, list)) else batch.to(device)


def fit(model: nn.Module, batches, *, steps: Optional[int] = None, epochs: Optional[int] = None,
        lr: float = 1e-3, warmup_steps: int = 0, weight_decay: float = 0.0, clip_norm: Optional[float] = 1.0,
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
        warmup_steps: steps of linear warm-up (see :func:`warmup_schedule`).
        weight_decay: AdamW's decoupled weight decay.
        clip_norm: clip the gradient norm to this value (None: no clipping).
        label_smoothing, pad_id: passed to :func:`batch_loss`.
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
            predictors (e.g. a tagger); default: :func:`batch_loss` with ``pad_id`` and ``label_smoothing``.
        schedule, total_steps: the learning-rate shape after the warm-up (see :func:`warmup_schedule`);
            with ``schedule="cosine"``, ``total_steps`` defaults to ``steps``, or without ``steps`` to
            ``epochs * len(batches)``.

    Under ``torchrun`` (after :func:`tfmini.distributed.init_from_env`), ``fit`` trains data-parallel
    with :class:`~torch.nn.parallel.DistributedDataParallel`: every rank draws the same global batch
    from ``batches`` and trains on its slice (:func:`tfmini.distributed.shard`). The default loss is
    each rank's sum of token losses divided by the global number of target tokens (times the number
    of ranks, which DDP's gradient average divides out), so a step equals a single-process step on the
    whole global batch. A custom ``loss_fn`` is averaged over ranks, as DDP does; it
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
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
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
                    loss, logged = _data_parallel_loss(net, distributed.shard(batch, rank, world), world,
                                                       pad_id, label_smoothing, loss_fn)
                else:
                    loss = loss_fn(model, batch) if loss_fn else batch_loss(model, batch, pad_id, label_smoothing)
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


def _fingerprint(model: nn.Module, batches, fit_kwargs: dict) -> str:
    """A key that changes with the architecture, the initial weights, the data, the training
    arguments and the source code of tfmini itself, so that a stale checkpoint never matches."""
    h = hashlib.sha256()
    h.update(str(model).encode())
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    h.update(repr(sorted(fit_kwargs.items())).encode())
    h.update(repr((getattr(batches, "examples", None), getattr(batches, "batch_size", None),
                   getattr(batches, "seed", None), getattr(batches, "epoch", None))).encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.read_bytes())
    h.update(torch.__version__.encode())
    return h.hexdigest()[:16]


def fit_or_load(model: nn.Module, batches, *, name: str, cache_dir=None, **fit_kwargs) -> History:
    """:func:`fit`, or load the result of an identical earlier :func:`fit` from a checkpoint.

    Chapters that train the same model with the same seed, data and arguments (say, chapter 2
    re-using chapter 1's baseline) can share one training run. The checkpoint is keyed by the
    architecture, the initial weights, the data, every training argument and tfmini's source code,
    so any change retrains. The returned history has ``loaded=True`` when it came from disk.
    Checkpoints hold CPU tensors and load on any device: a model trained on a GPU loads on a CPU-only
    machine and vice versa, and is moved to ``device`` (default: :func:`default_device`).

    Returns:
        the :class:`History` of the training run, trained now or loaded.

    Args:
        model, batches: as for :func:`fit`; ``batches`` must be :class:`~tfmini.data.Batches` (or have its
            ``examples``), whose examples, batch size and seed key the checkpoint.
        name: a readable prefix for the checkpoint file.
        cache_dir: where checkpoints live; default ``$TFMINI_CACHE`` or ``~/.cache/tfmini``.
        fit_kwargs: passed to :func:`fit`; callables (``eval_fn``, ``stop_fn``, ``loss_fn``) are not
            allowed, because they cannot be part of the key.
    """
    for key in ("eval_fn", "stop_fn", "loss_fn"):
        if fit_kwargs.get(key) is not None:
            raise ValueError(f"{key}: expected None with fit_or_load (a function cannot key a checkpoint), got {fit_kwargs[key]!r}")
    if not hasattr(batches, "examples"):
        raise ValueError(f"batches: expected tfmini.Batches (its .examples key the checkpoint) with fit_or_load, "
                         f"got {type(batches).__name__}; other data cannot key a checkpoint, so train it with fit")
    cache = Path(cache_dir or os.environ.get("TFMINI_CACHE") or Path.home() / ".cache" / "tfmini")
    path = cache / f"{name}-{_fingerprint(model, batches, fit_kwargs)}.pt"
    if path.exists():
        saved = torch.load(path, map_location="cpu", weights_only=True)  # saved anywhere, loaded on any machine
        model.load_state_dict(saved["state_dict"])
        device = fit_kwargs.get("device")
        model.to(torch.device(device) if device is not None else default_device()).eval()
        if saved["epoch"] is not None:
            batches.epoch = saved["epoch"]  # leave the data where training would have left it
        return History(**{**saved["history"], "loaded": True})
    history = fit(model, batches, **fit_kwargs)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "history": asdict(history),
                "epoch": getattr(batches, "epoch", None)}, tmp)
    tmp.replace(path)
    return history


def _prefix_match(pred: torch.Tensor, target: torch.Tensor, pad_id: int):
    """Align ``pred (B, L)`` to ``target (B, T)`` and return (matches, real) bool ``(B, T)``."""
    if pred.shape[0] != target.shape[0]:
        raise ValueError(f"pred: expected batch size {target.shape[0]} as in target, got {pred.shape[0]}")
    T = target.shape[1]
    if pred.shape[1] < T:
        pred = F.pad(pred, (0, T - pred.shape[1]), value=pad_id)
    real = target != pad_id
    return (pred[:, :T] == target) & real, real


def token_accuracy(pred: torch.Tensor, target: torch.Tensor, pad_id: int = 0) -> float:
    """Fraction of non-pad target positions (EOS included) that ``pred`` gets right.

    Args:
        pred: decoded ids ``(B, L)``; shorter than the target counts as padding, longer is cut.
        target: reference ids ``(B, T)``, without BOS.
        pad_id: the id of the padding token.

    Returns:
        a number in ``[0, 1]``.
    """
    match, real = _prefix_match(pred, target, pad_id)
    return match.sum().item() / max(real.sum().item(), 1)


def sequence_accuracy(pred: torch.Tensor, target: torch.Tensor, pad_id: int = 0) -> float:
    """Fraction of sequences reproduced exactly, EOS included (so no extra or missing tokens).

    Args:
        pred: decoded ids ``(B, L)``.
        target: reference ids ``(B, T)``, without BOS.
        pad_id: the id of the padding token.

    Returns:
        a number in ``[0, 1]``.
    """
    match, real = _prefix_match(pred, target, pad_id)
    return (match == real).all(dim=1).float().mean().item()


@torch.no_grad()
def evaluate(model: nn.Module, batches, max_len: int, bos_id: int, eos_id: int, pad_id: int = 0,
             beam_size: int = 1, device=None) -> Dict[str, float]:
    """Decode every source in ``batches`` (pairs ``(src, tgt)`` with ``tgt`` = BOS ... EOS) and score it.

    Args:
        model: an encoder-decoder tfmini model.
        batches: batches of ``(src (B, S), tgt (B, T))``.
        max_len: the longest output to decode.
        bos_id, eos_id, pad_id: the special ids of the target vocabulary.
        beam_size: 1 for :func:`~tfmini.decoding.greedy_decode`, more for
            :func:`~tfmini.decoding.beam_search`.
        device: where to decode (default: where the model is).

    Returns:
        ``{"token_acc": ..., "seq_acc": ...}`` over all examples.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    tok = seq = n_tok = n_seq = 0.0
    for src, tgt in batches:
        src, gold = src.to(device), tgt[:, 1:].to(device)
        if beam_size == 1:
            pred = greedy_decode(model, src, max_len, bos_id, eos_id, pad_id)
        else:
            pred = beam_search(model, src, max_len, beam_size, bos_id, eos_id, pad_id)
        real = (gold != pad_id).sum().item()
        tok += token_accuracy(pred, gold, pad_id) * real
        seq += sequence_accuracy(pred, gold, pad_id) * src.shape[0]
        n_tok += real
        n_seq += src.shape[0]
    model.train(was_training)
    return {"token_acc": tok / n_tok, "seq_acc": seq / n_seq}


def evaluate_by_length(model: nn.Module, pairs, src_vocab, tgt_vocab, bin_width: int = 8, max_len: int = 40,
                       beam_size: int = 1) -> List[Dict[str, float]]:
    """:func:`evaluate` on token pairs grouped by source length in bins of ``bin_width`` tokens.

    Args:
        model: an encoder-decoder tfmini model.
        pairs: ``(source_tokens, target_tokens)`` pairs.
        src_vocab, tgt_vocab: the :class:`~tfmini.data.Vocab` of each side.
        bin_width: source lengths per bin.
        max_len: the longest output to decode.
        beam_size: as in :func:`evaluate`.

    Returns:
        A list with one dict per non-empty bin (shortest first) with the keys ``lo`` and ``hi`` (the
        bin's source lengths), ``n`` (its number of examples), ``seq_acc`` and ``token_acc``.
    """
    from .data import Batches, encode_pairs

    if bin_width < 1:
        raise ValueError(f"bin_width: expected >= 1, got {bin_width}")
    groups: Dict[int, list] = {}
    for src, tgt in pairs:
        groups.setdefault((len(src) - 1) // bin_width, []).append((src, tgt))
    rows = []
    for g in sorted(groups):
        data = Batches(encode_pairs(groups[g], src_vocab, tgt_vocab), 500, pad_id=tgt_vocab.pad_id, shuffle=False)
        acc = evaluate(model, data, max_len, tgt_vocab.bos_id, tgt_vocab.eos_id, tgt_vocab.pad_id, beam_size)
        rows.append({"lo": g * bin_width + 1, "hi": (g + 1) * bin_width, "n": len(groups[g]), **acc})
    return rows
