"""Evaluation of an encoder-decoder: token and exact-sequence accuracy by decoding, overall and by source
length; and how closely its cross-attention heads follow a reference alignment."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .decoding import _new_tokens, beam_search, greedy_decode

__all__ = ["token_accuracy", "sequence_accuracy", "evaluate", "evaluate_by_length", "cross_attention",
           "head_alignment", "uniform_weight"]


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
def evaluate(model: nn.Module, batches, max_new_tokens: Optional[int] = None, bos_id: Optional[int] = None,
             eos_id: Optional[int] = None, pad_id: int = 0, beam_size: int = 1, device=None, *,
             max_len: Optional[int] = None) -> Dict[str, float]:
    """Decode every source in ``batches`` (pairs ``(src, tgt)`` with ``tgt`` = BOS ... EOS) and score it.

    Args:
        model: an encoder-decoder tfmini model.
        batches: batches of ``(src (B, S), tgt (B, T))``.
        max_new_tokens, max_len: the longest output to decode (``max_len`` is its former name, a keyword only).
        bos_id, eos_id, pad_id: the special ids of the target vocabulary (BOS and EOS required).
        beam_size: 1 for :func:`~tfmini.decoding.greedy_decode`, more for
            :func:`~tfmini.decoding.beam_search`.
        device: where to decode (default: where the model is).

    Returns:
        ``{"token_acc": ..., "seq_acc": ...}`` over all examples.
    """
    max_new_tokens = _new_tokens(max_new_tokens, max_len)
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        if value is None:
            raise ValueError(f"{name}: expected the target vocabulary's {name[:3].upper()} id, got None")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    tok = seq = n_tok = n_seq = 0.0
    for src, tgt in batches:
        src, gold = src.to(device), tgt[:, 1:].to(device)
        if beam_size == 1:
            pred = greedy_decode(model, src, max_new_tokens, bos_id, eos_id, pad_id)
        else:
            pred = beam_search(model, src, max_new_tokens, beam_size, bos_id, eos_id, pad_id)
        real = (gold != pad_id).sum().item()
        tok += token_accuracy(pred, gold, pad_id) * real
        seq += sequence_accuracy(pred, gold, pad_id) * src.shape[0]
        n_tok += real
        n_seq += src.shape[0]
    model.train(was_training)
    return {"token_acc": tok / n_tok, "seq_acc": seq / n_seq}


def evaluate_by_length(model: nn.Module, pairs, src_vocab, tgt_vocab, bin_width: int = 8,
                       max_new_tokens: Optional[int] = None, beam_size: int = 1, *,
                       max_len: Optional[int] = None) -> List[Dict[str, float]]:
    """:func:`evaluate` on token pairs grouped by source length in bins of ``bin_width`` tokens.

    Args:
        model: an encoder-decoder tfmini model.
        pairs: ``(source_tokens, target_tokens)`` pairs.
        src_vocab, tgt_vocab: the :class:`~tfmini.data.Vocab` of each side.
        bin_width: source lengths per bin.
        max_new_tokens, max_len: the longest output to decode, default 40 (``max_len`` is its former
            name, a keyword only).
        beam_size: as in :func:`evaluate`.

    Returns:
        A list with one dict per non-empty bin (shortest first) with the keys ``lo`` and ``hi`` (the
        bin's source lengths), ``n`` (its number of examples), ``seq_acc`` and ``token_acc``.
    """
    from .data import Batches, encode_pairs

    max_new_tokens = 40 if max_new_tokens is None and max_len is None else _new_tokens(max_new_tokens, max_len)
    if bin_width < 1:
        raise ValueError(f"bin_width: expected >= 1, got {bin_width}")
    groups: Dict[int, list] = {}
    for src, tgt in pairs:
        groups.setdefault((len(src) - 1) // bin_width, []).append((src, tgt))
    rows = []
    for g in sorted(groups):
        data = Batches(encode_pairs(groups[g], src_vocab, tgt_vocab), 500, pad_id=tgt_vocab.pad_id, shuffle=False)
        acc = evaluate(model, data, max_new_tokens, tgt_vocab.bos_id, tgt_vocab.eos_id, tgt_vocab.pad_id, beam_size)
        rows.append({"lo": g * bin_width + 1, "hi": (g + 1) * bin_width, "n": len(groups[g]), **acc})
    return rows


@torch.no_grad()
def cross_attention(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """The cross-attention weights of an encoder-decoder on one batch, the decoder fed the reference target.

    Args:
        model: a :class:`~tfmini.model.Transformer` (any model whose ``forward(src, tgt_in,
            need_weights=True)`` returns weights with a ``"cross"`` list, one entry per decoder layer).
        src: source ids ``(B, S)``.
        tgt: target ids ``(B, T + 1)``, BOS ... EOS; the decoder reads ``tgt[:, :-1]`` (teacher forcing).

    Returns:
        the weights of all decoder layers, stacked, on the CPU.

    Shape:
        ``(L, B, H, T, S)``: layer, example, head, target position, source position; row ``t`` is the
        distribution over the source with which the decoder predicts ``tgt[:, t + 1]``.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    _, weights = model(src.to(device), tgt[:, :-1].to(device), need_weights=True)
    model.train(was_training)
    return torch.stack(weights["cross"]).cpu()


def head_alignment(model: nn.Module, pairs, src_vocab, tgt_vocab, align: Callable[[Sequence[str]], List[int]],
                   batch_size: int = 250) -> torch.Tensor:
    """How closely each cross-attention head follows a reference alignment.

    For every target token (EOS excluded) it takes the weight a head puts on the source token that
    ``align`` names, with the decoder fed the reference target, and averages over all target tokens of
    ``pairs``. Attention spread evenly over the source scores :func:`uniform_weight`; a head that reads
    exactly the aligned token scores 1.

    Args:
        model: an encoder-decoder, as in :func:`cross_attention`.
        pairs: ``(source_tokens, target_tokens)`` pairs.
        src_vocab, tgt_vocab: the :class:`~tfmini.data.Vocab` of each side.
        align: maps the source tokens of one pair to one source index per target token, e.g.
            :func:`~tfmini.data.spelled_numbers_alignment`.
        batch_size: pairs per forward pass.

    Returns:
        the mean weight on the aligned source token, a number in ``[0, 1]`` for each head.

    Shape:
        ``(L, H)``: decoder layer, head.
    """
    from .data import pad_sequences

    total, count = None, 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        src = pad_sequences([src_vocab.encode(s) for s, _ in chunk], src_vocab.pad_id)
        tgt = pad_sequences([tgt_vocab.encode(t, bos=True, eos=True) for _, t in chunk], tgt_vocab.pad_id)
        b_idx, t_idx, s_idx = [], [], []
        for b, (s, t) in enumerate(chunk):
            ref = list(align(s))
            if len(ref) != len(t):
                raise ValueError(f"align: expected {len(t)} source indices for pair {start + b}, got {len(ref)}")
            b_idx += [b] * len(ref)
            t_idx += range(len(ref))
            s_idx += ref
        w = cross_attention(model, src, tgt)                                   # (L, B, H, T, S)
        on = w[:, torch.tensor(b_idx), :, torch.tensor(t_idx), torch.tensor(s_idx)].sum(0)   # (L, H)
        total = on if total is None else total + on
        count += len(b_idx)
    if total is None:
        raise ValueError("pairs: expected at least one pair, got none")
    return total / count


def uniform_weight(pairs) -> float:
    """The score of :func:`head_alignment` for attention spread evenly over each source.

    Args:
        pairs: ``(source_tokens, target_tokens)`` pairs.

    Returns:
        the mean over all target tokens of ``1 / len(source)``.
    """
    n = sum(len(t) for _, t in pairs)
    if n == 0:
        raise ValueError("pairs: expected at least one target token, got none")
    return sum(len(t) / len(s) for s, t in pairs) / n
