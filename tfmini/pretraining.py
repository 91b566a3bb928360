"""Pre-training data and objectives: real text every Python installation has, next-token windows for a
decoder-only model, and BERT-style masked tokens (with their loss) for an encoder-only model.

Shapes: B batch, T sequence length, V vocabulary size.

The text is the standard library's own source code, read with ``inspect``: no download, and the
same characters on every machine with the same Python version. A decoder-only model trains on
:func:`lm_windows` of it through :class:`~tfmini.data.Batches` and :func:`~tfmini.losses.batch_loss`;
an encoder-only model trains with ``fit(..., loss_fn=...)`` and :func:`masked_lm_loss`.
"""
from __future__ import annotations

import importlib
import inspect
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PYTHON_SOURCE_MODULES", "python_source_text", "train_val_split", "lm_windows", "IGNORE_INDEX",
           "mask_tokens", "masked_lm_loss"]

PYTHON_SOURCE_MODULES = (
    "textwrap", "string", "functools", "heapq", "bisect", "fractions", "statistics", "calendar", "difflib",
    "shlex", "pprint", "queue", "fnmatch", "glob", "copy", "dataclasses", "enum", "argparse", "json.decoder",
    "json.encoder", "random", "contextlib", "abc", "csv", "tokenize", "operator", "numbers", "collections",
    "ast", "gettext", "tempfile", "shutil", "ipaddress", "datetime",
)
"""The default modules of :func:`python_source_text`: pure-Python standard-library modules present in
every CPython since 3.10, in a fixed order."""

IGNORE_INDEX = -100
"""The label of a position that is not scored (the default ``ignore_index`` of ``F.cross_entropy``)."""


def python_source_text(modules: Sequence[str] = PYTHON_SOURCE_MODULES, max_chars: Optional[int] = None) -> str:
    """The source code of standard-library modules, as one string of printable ASCII.

    The sources (``inspect.getsource``) are joined in the given order, separated by a blank line;
    tabs become four spaces and every character that is neither printable ASCII nor a newline is
    dropped. The result is deterministic for a given Python version.

    Args:
        modules: importable names of pure-Python modules (a C extension has no source to read).
        max_chars: keep only the first ``max_chars`` characters (default: all).

    Returns:
        a string of the characters ``" "`` to ``"~"`` and ``"\\n"``.
    """
    if isinstance(modules, str) or len(modules) == 0:
        raise ValueError(f"modules: expected a non-empty sequence of module names, got {modules!r}")
    if max_chars is not None and max_chars < 1:
        raise ValueError(f"max_chars: expected None or an int >= 1, got {max_chars}")
    parts = []
    for name in modules:
        try:
            parts.append(inspect.getsource(importlib.import_module(name)))
        except (ImportError, OSError, TypeError) as err:
            raise ValueError(f"modules: expected importable modules with Python source, got {name!r} ({err})") from None
    text = "\n\n".join(parts).expandtabs(4)
    text = "".join(c for c in text if c == "\n" or " " <= c <= "~")
    return text if max_chars is None else text[:max_chars]


def train_val_split(seq: Sequence, val_fraction: float = 0.1) -> Tuple[Sequence, Sequence]:
    """Split a sequence into a leading training part and a trailing validation part.

    For language modelling the split must be contiguous: windows drawn at random from one text
    overlap, and a model would be scored on characters it was trained on.

    Args:
        seq: anything that can be sliced, e.g. a string, a list of ids or a 1-D tensor.
        val_fraction: the share of ``seq`` that goes to the validation part.

    Returns:
        ``(seq[:n], seq[n:])`` with ``n = round(len(seq) * (1 - val_fraction))``, both non-empty.
    """
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction: expected a number in (0, 1), got {val_fraction}")
    n = round(len(seq) * (1 - val_fraction))
    if n == 0 or n == len(seq):
        raise ValueError(f"seq: expected enough items for two non-empty parts with val_fraction={val_fraction}, "
                         f"got {len(seq)}")
    return seq[:n], seq[n:]


def lm_windows(ids: Sequence[int], length: int, stride: Optional[int] = None) -> List[List[int]]:
    """Fixed-length windows of a long id sequence, to batch with :class:`~tfmini.data.Batches`.

    A window of ``length`` ids gives ``length - 1`` next-token predictions (``batch_loss`` predicts
    ``ids[:, 1:]`` from ``ids[:, :-1]``). Windows start every ``stride`` ids; a remainder shorter than
    ``length`` at the end is dropped.

    Args:
        ids: the whole text as ids, a list or a 1-D tensor ``(N,)``.
        length: ids per window (the model's context plus one).
        stride: distance between the starts of two windows (default ``length``: no overlap).

    Returns:
        ``(len(ids) - length) // stride + 1`` lists of ``length`` ids.
    """
    if length < 2:
        raise ValueError(f"length: expected >= 2 (an input and a next token), got {length}")
    stride = length if stride is None else stride
    if stride < 1:
        raise ValueError(f"stride: expected >= 1, got {stride}")
    if len(ids) < length:
        raise ValueError(f"ids: expected at least length={length} ids, got {len(ids)}")
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return [ids[s:s + length] for s in range(0, len(ids) - length + 1, stride)]


def mask_tokens(ids: torch.Tensor, mask_id: int, vocab_size: int, mask_prob: float = 0.15,
                replace_prob: float = 0.8, random_prob: float = 0.1, special_ids: Sequence[int] = (0, 1, 2, 3),
                generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Corrupt a batch for masked-language-model training, the recipe of BERT (Devlin et al., 2019).

    In each sequence, ``k = max(1, round(mask_prob * n))`` of its ``n`` ordinary tokens (not in
    ``special_ids``, not ``mask_id``) are chosen uniformly without replacement. A chosen token becomes
    ``mask_id`` with probability ``replace_prob``, a uniformly random ordinary token with probability
    ``random_prob``, and stays as it is otherwise; only chosen positions are scored. The defaults are
    BERT's 15 % and 80/10/10; ``replace_prob=1.0, random_prob=0.0`` always shows ``mask_id``.

    Args:
        ids: token ids, an integer tensor.
        mask_id: id of the mask token (``<mask>``); never chosen itself.
        vocab_size: number of ids; random replacements are drawn from the ordinary ids below it.
        mask_prob: share of each sequence's ordinary tokens to choose.
        replace_prob, random_prob: shares of the chosen tokens shown as ``mask_id`` and as a random token.
        special_ids: ids never chosen nor drawn (default: :class:`~tfmini.data.Vocab`'s pad, BOS, EOS and UNK).
        generator: makes the draw reproducible. The random numbers are drawn on the generator's device
            and moved to the device of ``ids``, so a CPU generator gives the same corruption for ids on
            a GPU as for the same ids on the CPU.

    Shape: ids ``(B, T)`` -> inputs ``(B, T)``, labels ``(B, T)``.

    Returns:
        ``(inputs, labels)``; ``labels`` is the original id at chosen positions and
        :data:`IGNORE_INDEX` elsewhere.
    """
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        got = f"shape {tuple(ids.shape)} and dtype {ids.dtype}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"ids: expected an integer tensor of shape (B, T), got {got}")
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"mask_id: expected in [0, {vocab_size - 1}] (vocab_size={vocab_size}), got {mask_id}")
    if not 0 < mask_prob <= 1:
        raise ValueError(f"mask_prob: expected a number in (0, 1], got {mask_prob}")
    if replace_prob < 0 or random_prob < 0 or replace_prob + random_prob > 1:
        raise ValueError(f"replace_prob, random_prob: expected >= 0 with a sum <= 1, got {replace_prob}, {random_prob}")
    excluded = set(special_ids) | {mask_id}
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in excluded], dtype=torch.long, device=ids.device)
    if random_prob > 0 and len(ordinary) == 0:
        raise ValueError(f"vocab_size: expected ordinary ids to draw random replacements from, got {vocab_size}")
    candidate = torch.ones_like(ids, dtype=torch.bool)
    for i in excluded:
        candidate &= ids != i
    k = (candidate.sum(dim=1).double() * mask_prob).round().clamp(min=1)  # (B,) positions to choose per sequence
    where = ids.device if generator is None else generator.device  # draw there, use on ids.device
    score = torch.rand(ids.shape, generator=generator, device=where).to(ids.device).masked_fill(~candidate, 2.0)
    rank = score.argsort(dim=1).argsort(dim=1)  # (B, T) rank of each position's score in its row
    chosen = (rank < k[:, None]) & candidate
    u = torch.rand(ids.shape, generator=generator, device=where).to(ids.device)  # (B, T) which corruption
    inputs = torch.where(chosen & (u < replace_prob), mask_id, ids)
    if random_prob > 0:
        pick = torch.randint(len(ordinary), ids.shape, generator=generator, device=where).to(ids.device)  # (B, T)
        swap = chosen & (u >= replace_prob) & (u < replace_prob + random_prob)
        inputs = torch.where(swap, ordinary[pick], inputs)
    labels = torch.where(chosen, ids, IGNORE_INDEX)
    return inputs, labels


def masked_lm_loss(model: nn.Module, ids: torch.Tensor, *, mask_id: int, vocab_size: Optional[int] = None,
                   generator: Optional[torch.Generator] = None, **mask_kwargs) -> torch.Tensor:
    r"""The masked-language-model loss: corrupt ``ids`` with :func:`mask_tokens`, run the model on the
    corrupted batch, and average the cross-entropy over the chosen positions only,

    .. math::
        \mathcal L = -\frac{1}{|\mathcal M|} \sum_{(b, t) \in \mathcal M} \log p_\theta(x_{b,t} \mid \tilde x_b),

    where :math:`\mathcal M` is the set of chosen positions and :math:`\tilde x` the corrupted input.
    Use it with ``fit(model, batches, loss_fn=partial(masked_lm_loss, mask_id=...))``.

    Args:
        model: maps ids ``(B, T)`` to logits ``(B, T, V)`` (e.g. :class:`~tfmini.model.EncoderOnlyLM`).
        ids: the uncorrupted batch ``(B, T)``.
        mask_id: id of the mask token.
        vocab_size: defaults to ``model.cfg.vocab_size`` (of ``model.module`` when ``model`` is a
            wrapper such as the ``DistributedDataParallel`` that :func:`~tfmini.train.fit` uses under ``torchrun``).
        generator: makes the masking reproducible (on any device: see :func:`mask_tokens`).
        **mask_kwargs: ``mask_prob``, ``replace_prob``, ``random_prob``, ``special_ids`` of :func:`mask_tokens`.

    Returns:
        a scalar tensor.
    """
    if vocab_size is None:
        cfg = getattr(getattr(model, "module", model), "cfg", None)
        if cfg is None:
            raise ValueError("vocab_size: expected an int for a model without a cfg.vocab_size, got None")
        vocab_size = cfg.vocab_size
    inputs, labels = mask_tokens(ids, mask_id, vocab_size, generator=generator, **mask_kwargs)
    logits = model(inputs)  # (B, T, V)
    chosen = labels != IGNORE_INDEX
    return F.cross_entropy(logits[chosen].float(), labels[chosen])
