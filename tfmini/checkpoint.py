"""Checkpoints of training runs: :func:`fit_or_load` trains once and loads the result afterwards."""
from __future__ import annotations

import hashlib
import os
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from .train import History, default_device, fit

__all__ = ["fit_or_load"]


def _fingerprint(model: nn.Module, batches, fit_kwargs: dict) -> str:
    """A key that changes with the architecture and the settings of its modules, the initial weights,
    the data, the training arguments and the source code of tfmini itself, so that a stale checkpoint
    never matches."""
    h = hashlib.sha256()
    h.update(str(model).encode())
    # settings that change what a module computes without changing its submodules or weights, and that
    # its repr may not show (Seq2SeqRNN's reverse_source): every plain attribute but the train/eval mode
    for path, module in model.named_modules():
        settings = sorted((k, v) for k, v in vars(module).items()
                          if not k.startswith("_") and k != "training" and isinstance(v, (bool, int, float, str)))
        h.update(repr((path, settings)).encode())
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
    """:func:`~tfmini.train.fit`, or load the result of an identical earlier :func:`~tfmini.train.fit` from a checkpoint.

    Chapters that train the same model with the same seed, data and arguments (say, chapter 2
    re-using chapter 1's baseline) can share one training run. The checkpoint is keyed by the
    architecture, the initial weights, the data, every training argument and tfmini's source code,
    so any change retrains. The returned history has ``loaded=True`` when it came from disk.
    Checkpoints hold CPU tensors and load on any device: a model trained on a GPU loads on a CPU-only
    machine and vice versa, and is moved to ``device`` (default: :func:`~tfmini.train.default_device`).

    Returns:
        the :class:`~tfmini.train.History` of the training run, trained now or loaded.

    Args:
        model, batches: as for :func:`~tfmini.train.fit`; ``batches`` must be :class:`~tfmini.data.Batches` (or have its
            ``examples``), whose examples, batch size and seed key the checkpoint.
        name: a readable prefix for the checkpoint file.
        cache_dir: where checkpoints live; default ``$TFMINI_CACHE`` or ``~/.cache/tfmini``.
        fit_kwargs: passed to :func:`~tfmini.train.fit`; callables (``eval_fn``, ``stop_fn``, ``loss_fn``) are not
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
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two processes may train the same model at once
    torch.save({"state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "history": asdict(history),
                "epoch": getattr(batches, "epoch", None)}, tmp)
    tmp.replace(path)
    return history
