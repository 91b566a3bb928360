"""Data-parallel training: the helpers :func:`tfmini.fit <tfmini.train.fit>` uses when it runs under ``torchrun``.

Each of ``W`` processes (ranks) holds a full copy of the model. Every rank draws the same global
batch of ``B`` examples, keeps its own slice of about ``B / W`` rows, and computes gradients on it;
PyTorch's :class:`~torch.nn.parallel.DistributedDataParallel` then sums the gradients across ranks
(an all-reduce) and divides by ``W``, so every rank takes the same optimiser step. With the loss of
each rank scaled as in :func:`tfmini.train.fit` (token sums over the global token count), that step
is the one a single process would take on the whole global batch.

Launch a script that calls :func:`tfmini.fit <tfmini.train.fit>` with, for example::

    torchrun --standalone --nproc_per_node=2 train.py          # 2 processes on this machine
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 \\
             --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 train.py   # 2 machines x 8 GPUs

and call :func:`init_from_env` at its top. The backend is ``nccl`` on GPUs and ``gloo`` on CPUs.
"""
from __future__ import annotations

import os
from typing import Tuple

import torch
import torch.distributed as dist
from torch import nn

from .losses import _target_count, batch_loss

__all__ = ["init_from_env", "is_distributed", "rank", "world_size", "local_device", "shard"]


def is_distributed() -> bool:
    """True when a process group with more than one process is running.

    Returns:
        whether :func:`tfmini.train.fit` trains data-parallel.
    """
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 when not distributed).

    Returns:
        an int in ``[0, world_size())``.
    """
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """The number of processes (1 when not distributed).

    Returns:
        an int >= 1.
    """
    return dist.get_world_size() if is_distributed() else 1


def local_device() -> torch.device:
    """The device of this process: ``cuda:LOCAL_RANK`` when GPUs are present, else the CPU.

    Returns:
        a ``torch.device``.

    Raises:
        ValueError: ``LOCAL_RANK`` names a GPU this machine does not have.
    """
    if torch.cuda.is_available():
        local_rank, gpus = int(os.environ.get("LOCAL_RANK", 0)), torch.cuda.device_count()
        if local_rank >= gpus:
            raise ValueError(f"LOCAL_RANK: expected less than the {gpus} GPU(s) of this machine, got {local_rank} "
                             "(start at most one process per GPU, e.g. torchrun --nproc_per_node=N)")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_from_env(backend: str | None = None) -> Tuple[int, int]:
    """Join the process group that ``torchrun`` describes in the environment, if there is one.

    Reads ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` (all set by
    ``torchrun``). Outside ``torchrun`` (no ``WORLD_SIZE``, or ``WORLD_SIZE=1``) it does nothing, so the
    same script runs alone or data-parallel.

    Args:
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU); default: ``"nccl"`` when CUDA is available.

    Returns:
        ``(rank, world_size)``.
    """
    if backend not in (None, "gloo", "nccl"):
        raise ValueError(f"backend: expected None, 'gloo' or 'nccl', got {backend!r}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(local_device())
        dist.init_process_group(backend or ("nccl" if torch.cuda.is_available() else "gloo"))
    return rank(), world_size()


def shard(batch, rank: int, world_size: int):
    """This rank's rows of a global batch: the ``rank``-th of ``world_size`` contiguous slices.

    Args:
        batch: a tensor ``(B, ...)`` or a tuple of tensors sharing the batch size ``B``.
        rank, world_size: which slice, of how many.

    Shape:
        ``(B, ...)`` -> ``(B_r, ...)`` with ``B_r`` = ``B // world_size`` or one more (the first
        ``B % world_size`` ranks take one extra row).

    Returns:
        the slice, of the same kind as ``batch``.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank: expected 0 <= rank < world_size={world_size}, got {rank}")
    parts = batch if isinstance(batch, (tuple, list)) else (batch,)
    B = parts[0].shape[0]
    if B < world_size:
        raise ValueError(f"batch: expected at least world_size={world_size} rows to share, got {B}")
    sliced = tuple(torch.tensor_split(x, world_size)[rank] for x in parts)
    return sliced if isinstance(batch, (tuple, list)) else sliced[0]


def _custom_loss(value):
    """A custom loss function's result as ``(mean, count)``: a scalar mean (count None), or the pair
    ``(mean, count)`` of the mean over ``count`` scored items (tokens)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"loss_fn: expected a scalar loss or a pair (mean loss, number of scored tokens), "
                             f"got a {type(value).__name__} of {len(value)}")
        loss, count = value
        return loss, torch.as_tensor(count, dtype=torch.float32, device=loss.device)
    return value, None


def _data_parallel_loss(net: nn.Module, batch, world: int, pad_id: int, label_smoothing: float, loss_fn,
                        rows: Tuple[int, int] = (1, 1)):
    """This rank's loss, scaled so that DDP's gradient average is the gradient of the global-batch loss;
    and that global loss, for the log.

    The default loss and a custom ``loss_fn`` that returns ``(mean, count)`` are weighted by tokens:
    each rank's sum over its tokens, divided by the global number of tokens. A custom loss that returns
    only its mean is weighted by this rank's share ``rows = (this rank's rows, global rows)`` of the
    batch, which is the same when every row has as many scored tokens."""
    if loss_fn is not None:
        loss, count = _custom_loss(loss_fn(net, batch))
        if count is None:  # a mean over rows of equal weight: the rank's share of the rows
            count = torch.tensor(float(rows[0]), device=loss.device)
        total = loss * count  # this rank's sum
        stats = torch.stack([total.detach().float(), count.float()])
        torch.distributed.all_reduce(stats)  # global sum, global count
        return total * world / stats[1], stats[0] / stats[1]
    total = batch_loss(net, batch, pad_id, label_smoothing, reduction="sum")
    stats = torch.stack([total.detach(), _target_count(batch, pad_id)])
    torch.distributed.all_reduce(stats)  # global sum of token losses, global number of target tokens
    return total * world / stats[1], stats[0] / stats[1]
