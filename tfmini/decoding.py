"""Decoding: greedy search, sampling and beam search, with or without a KV cache.

Works with every model that has the two decoding methods
``start_decoding(inputs) -> state`` and ``decode_next(ys, state, use_cache) -> logits (B, V)``:
:class:`~tfmini.model.Transformer`, :class:`~tfmini.model.DecoderOnlyLM` and the RNN
encoder-decoders of :mod:`tfmini.rnn`. ``state`` is a nest of dicts/lists of batch-first tensors,
so beam search can reorder it with :func:`select_batch`.

For an encoder-decoder model ``inputs`` is the source ``(B, S)`` and decoding starts from BOS;
for a decoder-only model ``inputs`` is the prompt ``(B, P)``. All functions return only the
generated tokens ``(B, L)`` (no BOS, no prompt), padded with ``pad_id`` after EOS.

Decoding runs where the model is: ``inputs`` built on the CPU are moved to the model's device, and
the generated tokens come back on the device of ``inputs``. Greedy decoding and beam search wait for
the GPU only to test, once per step, whether every sequence has produced EOS; sampling also waits in
``torch.multinomial``, which checks the probabilities on the host.

Shapes: B batch, K beam size, V vocabulary, t tokens so far, L generated length.
"""
from __future__ import annotations

import inspect
import itertools
import numbers
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .model import KVCache, LayerKVCache

__all__ = ["select_batch", "greedy_decode", "sample", "beam_search", "generate"]


def select_batch(state, index: torch.Tensor):
    """Index every tensor in a nest of dicts/lists/tuples along its first (batch) dimension.

    Beam search uses it to reorder and copy the decoding state of the surviving hypotheses.

    Args:
        state: a tensor, or dicts/lists/tuples of tensors (other leaves are returned unchanged).
        index: ``(N,)`` long tensor of batch rows to take, in order; rows may repeat.

    Returns:
        the same nest with every tensor ``x`` replaced by ``x.index_select(0, index)``.

    Shape:
        each tensor ``(B, ...)`` -> ``(N, ...)``.
    """
    if isinstance(state, torch.Tensor):
        return state.index_select(0, index)
    if isinstance(state, LayerKVCache):  # its buffers are selected whole: the room for later steps stays
        return state.index_select(index)
    if isinstance(state, dict):
        return {k: select_batch(v, index) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(select_batch(v, index) for v in state)
    return state


def _model_device(model, default: torch.device) -> torch.device:
    """The device of the model's first parameter or buffer (``default`` for a model without any)."""
    for tensor in itertools.chain(model.parameters(), model.buffers()) if isinstance(model, nn.Module) else ():
        return tensor.device
    return default


def _vocab_size(model) -> Optional[int]:
    """The size of the output vocabulary of a tfmini model (None when the model does not say)."""
    cfg = getattr(model, "cfg", None)
    return getattr(cfg, "vocab_size", None) or getattr(model, "tgt_vocab_size", None)


def _start(model, inputs: torch.Tensor, bos_id: Optional[int], attention_mask: Optional[torch.Tensor] = None):
    """Check the inputs, move them to the model's device and start decoding: ``(state, ys (B, t))``."""
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 or inputs.shape[0] == 0 or inputs.shape[1] == 0:
        got = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise ValueError(f"inputs: expected non-empty token ids of shape (B, S), got {got}")
    device = _model_device(model, inputs.device)
    inputs = inputs.to(device)
    if attention_mask is not None:
        state = model.start_decoding(inputs, attention_mask=attention_mask.to(device))
    else:
        state = model.start_decoding(inputs)
    if getattr(model, "decoder_only", False):
        return state, inputs
    if bos_id is None:
        raise ValueError("bos_id: expected the BOS token id for an encoder-decoder model, got None")
    V = _vocab_size(model)
    if V is not None and not 0 <= bos_id < V:  # decode_next does not check ids: the models' own tokens are valid
        raise ValueError(f"bos_id: expected an id in [0, {V - 1}] (the target vocabulary), got {bos_id}")
    return state, torch.full((inputs.shape[0], 1), bos_id, dtype=torch.long, device=inputs.device)


def _reserve(state, positions: int) -> None:
    """Tell a tfmini KV cache in the decoding state how many positions it will hold, so that it
    allocates its buffers once (other states are left alone)."""
    cache = state.get("cache") if isinstance(state, dict) else None
    if isinstance(cache, KVCache):
        cache.reserve(positions)


def _new_tokens(max_new_tokens: Optional[int], max_len: Optional[int]) -> int:
    """The number of tokens to generate, given as ``max_new_tokens`` or by its former name ``max_len``."""
    if max_len is not None:
        if max_new_tokens is not None:
            raise ValueError(f"max_new_tokens: expected it or its former name max_len, not both; got "
                             f"{max_new_tokens} and {max_len}")
        max_new_tokens = max_len
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
    return max_new_tokens


def _room(model, start: int) -> Optional[int]:
    """How many tokens the model can generate after ``start`` tokens before it runs out of positions:
    the last generated token is never read, so ``start + n - 1 <= cfg.max_len`` (None: no limit)."""
    limit = getattr(getattr(model, "cfg", None), "max_len", None)
    return None if limit is None else max(limit - start + 1, 0)


def _loop(model, inputs, steps, bos_id, eos_id, pad_id, use_cache,
          pick: Callable[[torch.Tensor], torch.Tensor], attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    state, ys = _start(model, inputs, bos_id, attention_mask)  # ys on the model's device
    B, start = ys.shape
    room = _room(model, start)
    if room is not None:
        steps = min(steps, room)  # stop where the model's positions end, not with an error midway
    if use_cache:
        _reserve(state, start + steps - 1)  # the last token is never fed back
    seq = torch.full((B, start + steps), pad_id, dtype=torch.long, device=ys.device)  # (B, t + L), filled in place
    seq[:, :start] = ys
    finished = torch.zeros(B, dtype=torch.bool, device=ys.device) if eos_id is not None else None
    t = start
    for _ in range(steps):
        nxt = pick(model.decode_next(seq[:, :t], state, use_cache))  # (B,)
        if finished is not None:
            nxt = nxt.masked_fill(finished, pad_id)
        seq[:, t] = nxt
        t += 1
        if finished is not None:
            finished |= nxt == eos_id
            if bool(finished.all()):  # the one synchronisation per step: stop when every sequence is done
                break
    return seq[:, start:t].to(inputs.device)


@torch.no_grad()
def greedy_decode(model, inputs: torch.Tensor, max_new_tokens: Optional[int] = None, bos_id: Optional[int] = None,
                  eos_id: Optional[int] = None, pad_id: int = 0, use_cache: bool = True, *,
                  max_len: Optional[int] = None) -> torch.Tensor:
    """Pick the most probable token at every step.

    Args:
        model: an encoder-decoder or decoder-only tfmini model (in eval mode).
        inputs: source ``(B, S)`` or prompt ``(B, P)``.
        max_new_tokens, max_len: maximum number of generated tokens (``max_len`` is its former name, a
            keyword only); decoding also stops where the model runs out of positions (the prefix read at
            the last step must fit in ``model.cfg.max_len``).
        bos_id: start token (encoder-decoder models).
        eos_id: stop token; a finished sequence is padded with ``pad_id``.
        pad_id: the id written after a sequence's EOS.
        use_cache: reuse keys and values of earlier positions (same result, less work).

    Returns:
        generated ids ``(B, L)``, ``L <= max_new_tokens``.

    Shape:
        inputs ``(B, S)`` or ``(B, P)`` -> ``(B, L)``.
    """
    return _loop(model, inputs, _new_tokens(max_new_tokens, max_len), bos_id, eos_id, pad_id, use_cache,
                 lambda z: z.argmax(-1))


@torch.no_grad()
def sample(model, inputs: torch.Tensor, max_new_tokens: Optional[int] = None, temperature: float = 1.0,
           top_k: Optional[int] = None, bos_id: Optional[int] = None, eos_id: Optional[int] = None, pad_id: int = 0,
           generator: Optional[torch.Generator] = None, use_cache: bool = True, *, top_p: Optional[float] = None,
           max_len: Optional[int] = None) -> torch.Tensor:
    """Sample each token from ``softmax(logits / temperature)``, optionally restricted to the ``top_k`` best
    and to the nucleus of probability ``top_p``.

    The three apply in this order, as Hugging Face's ``generate`` applies its temperature, top-k and
    top-p warpers: divide the logits by ``temperature``, keep the ``top_k`` largest, then keep the
    most probable tokens of what remains (renormalised) until their probability reaches ``top_p``
    (Holtzman et al., 2020): a token is kept when the tokens more probable than it sum to less than
    ``top_p``, so the most probable token is always kept.

    Args:
        model: an encoder-decoder or decoder-only tfmini model (in eval mode).
        inputs: source ``(B, S)`` or prompt ``(B, P)``.
        max_new_tokens, max_len: maximum number of generated tokens (``max_len`` is its former name, a
            keyword only); decoding also stops where the model runs out of positions (the prefix read at
            the last step must fit in ``model.cfg.max_len``).
        temperature: > 0; below 1 sharpens the distribution, above 1 flattens it.
        top_k: sample only among the ``top_k`` most probable tokens (default: all of them).
        bos_id, eos_id, pad_id: as in :func:`greedy_decode`.
        generator: a ``torch.Generator``, for reproducible samples. Tokens are drawn on the
            generator's device: a CPU generator gives the same samples for a model on the GPU as on
            the CPU (up to the two devices' rounding of the probabilities), at the cost of copying
            the probabilities ``(B, V)`` to the CPU at every step; a generator on the model's device
            avoids the copy.
        use_cache: reuse keys and values of earlier positions (same result, less work).
        top_p: nucleus sampling, ``0 < top_p <= 1`` (default None: no nucleus; 1 keeps every token).

    Returns:
        generated ids ``(B, L)``, ``L <= max_new_tokens``.

    Shape:
        inputs ``(B, S)`` or ``(B, P)`` -> ``(B, L)``.

    Raises:
        ValueError: ``temperature <= 0``, ``top_k < 1`` or ``top_p`` outside ``(0, 1]``.
    """
    pick = _sampler(temperature, top_k, generator, top_p)
    return _loop(model, inputs, _new_tokens(max_new_tokens, max_len), bos_id, eos_id, pad_id, use_cache, pick)


def _sampler(temperature: float, top_k: Optional[int], generator: Optional[torch.Generator],
             top_p: Optional[float] = None, hint: str = "use greedy_decode for temperature 0"):
    """Check the settings; return logits ``(B, V)`` -> one token per row drawn from ``softmax(logits / temperature)``
    restricted to the top ``top_k`` and the nucleus ``top_p``."""
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not temperature > 0:
        raise ValueError(f"temperature: expected > 0 ({hint}), got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k: expected None or an int >= 1, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1):
        raise ValueError(f"top_p: expected None or a number in (0, 1], got {top_p!r}")

    def pick(logits):
        logits = logits.float() / temperature
        if top_k is not None:
            kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if top_p is not None and top_p < 1:
            logits = _top_p_filter(logits, top_p)
        probs = torch.softmax(logits, -1)  # (B, V)
        where = probs.device if generator is None else generator.device
        return torch.multinomial(probs.to(where), 1, generator=generator)[:, 0].to(probs.device)  # (B,)
    return pick


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Top-p filtering: keep the most probable tokens until their probability reaches ``top_p``.

    Sorted by probability, a token is kept when the tokens before it sum to less than ``top_p``; the
    most probable token is always kept. The same tokens as Hugging Face's ``TopPLogitsWarper`` (which
    drops the tokens whose cumulative probability counted from the least probable is at most ``1 - top_p``).

    Args:
        logits: ``(B, V)`` (``-inf`` for tokens already excluded).
        top_p: in ``(0, 1]``.

    Returns:
        the logits with the tokens outside the nucleus set to ``-inf``.

    Shape:
        ``(B, V)`` -> ``(B, V)``.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
    probs = torch.softmax(sorted_logits, dim=-1)
    before = probs.cumsum(dim=-1) - probs  # (B, V) probability of the more probable tokens
    drop = before >= top_p
    drop[:, 0] = False  # the most probable token always stays
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


@torch.no_grad()
def beam_search(model, inputs: torch.Tensor, max_new_tokens: Optional[int] = None, beam_size: int = 4,
                bos_id: Optional[int] = None, eos_id: Optional[int] = None, pad_id: int = 0,
                length_penalty: float = 0.0, use_cache: bool = True, *,
                max_len: Optional[int] = None, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""Keep the ``beam_size`` most probable unfinished prefixes at every step; return the best finished one.

    A hypothesis is scored by its total log-probability divided by the length penalty
    :math:`((5 + L) / 6)^\alpha` of Wu et al. (2016), :math:`L` its number of tokens (EOS included),
    :math:`\alpha` = ``length_penalty`` (0 = no normalisation). At every step each of the ``K`` beams
    proposes every next token. A proposal that ends with EOS leaves the beam: it joins the ``K`` best
    finished hypotheses of its batch element, ranked by their penalised scores, and frees its slot, so
    the beam always holds ``K`` unfinished prefixes. A batch element is done once it has ``K`` finished
    hypotheses and its best unfinished prefix, penalised at its current length, scores no higher than
    the worst of them (exact for ``length_penalty=0``, where scores only fall as prefixes grow; the
    usual heuristic otherwise); from then on its hypotheses no longer change, however long the
    other elements of the batch run, so each element's result is the one it gets alone. Prefixes
    still unfinished after ``max_new_tokens`` tokens compete with the finished ones. Without
    ``eos_id`` nothing finishes and the best prefix of length ``max_new_tokens`` wins.

    Args:
        model: an encoder-decoder or decoder-only tfmini model (in eval mode).
        inputs: source ``(B, S)`` or prompt ``(B, P)``.
        max_new_tokens, max_len: maximum number of generated tokens (``max_len`` is its former name, a
            keyword only); decoding also stops where the model runs out of positions (the prefix read at
            the last step must fit in ``model.cfg.max_len``).
        beam_size: number of unfinished hypotheses ``K`` kept at every step.
        bos_id, eos_id, pad_id: as in :func:`greedy_decode`.
        length_penalty: the exponent :math:`\alpha` above.
        use_cache: reuse keys and values of earlier positions (same result, less work).
        attention_mask: ``(B, P)``, 1 = real token: prompts of different lengths padded on the left,
            as in :func:`generate` (decoder-only models); each row is searched as it would be alone.

    Returns:
        the best hypothesis per batch element, ``(B, L)``, padded with ``pad_id`` after its EOS.

    Shape:
        inputs ``(B, S)`` or ``(B, P)`` -> ``(B, L)``; internally ``B * K`` hypotheses.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size: expected >= 1, got {beam_size}")
    steps = _new_tokens(max_new_tokens, max_len)  # the number of tokens to generate
    mask = None
    if attention_mask is not None and isinstance(inputs, torch.Tensor):  # bad inputs: _start names them
        mask = _left_padding(model, attention_mask, inputs, "inputs")
    state, ys = _start(model, inputs, bos_id, mask)  # a mask in the state is reordered with it
    B, K, start, device = ys.shape[0], beam_size, ys.shape[1], ys.device
    room = _room(model, start)
    if room is not None:
        steps = min(steps, room)  # stop where the model's positions end, not with an error midway
    if use_cache:
        _reserve(state, start + steps - 1)

    def penalty(length: int) -> float:
        return ((5.0 + length) / 6.0) ** length_penalty if length_penalty else 1.0

    expand = torch.arange(B, device=device).repeat_interleave(K)  # (B*K,)
    state, ys = select_batch(state, expand), ys[expand]
    scores = torch.zeros(B, K, device=device)
    scores[:, 1:] = float("-inf")  # all beams start identical: keep one
    # the K best finished hypotheses of each batch element: penalised scores and tokens (padded)
    done_scores = torch.full((B, K), float("-inf"), device=device)
    done_tokens = torch.full((B, K, steps), pad_id, dtype=torch.long, device=device)
    offsets = (torch.arange(B, device=device) * K)[:, None]  # (B, 1): first row of each element's beams
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,) True = this element's search is over
    for step in range(steps):
        logp = F.log_softmax(model.decode_next(ys, state, use_cache).float(), dim=-1)  # (B*K, V)
        V = logp.shape[-1]
        cand = scores[:, :, None] + logp.reshape(B, K, V)  # (B, K, V) total log-probabilities
        if eos_id is not None:
            ended = cand[:, :, eos_id] / penalty(step + 1)  # (B, K): each beam followed by EOS, penalised
            ended = ended.masked_fill(done[:, None], float("-inf"))  # a finished search takes nothing more
            toks = F.pad(ys[:, start:], (0, steps - step), value=pad_id).reshape(B, K, steps).clone()
            toks[:, :, step] = eos_id
            pool_scores = torch.cat([done_scores, ended], dim=1)  # (B, 2K)
            done_scores, keep = pool_scores.topk(K, dim=1)
            done_tokens = torch.cat([done_tokens, toks], dim=1).gather(
                1, keep[:, :, None].expand(B, K, steps))
            cand[:, :, eos_id] = float("-inf")  # EOS leaves the beam; the slots go to unfinished prefixes
        scores, idx = cand.reshape(B, K * V).topk(K, dim=-1)  # (B, K)
        beam, tok = idx // V, idx % V
        rows = (offsets + beam).reshape(-1)  # (B*K,)
        ys = torch.cat([ys[rows], tok.reshape(-1, 1)], dim=1)
        state = select_batch(state, rows)
        if eos_id is not None and step + 1 < steps:
            best_open = scores.max(dim=1).values / penalty(step + 1)  # (B,)
            # done: K finished hypotheses, none of which the best unfinished prefix can still beat; an
            # element that is done stays done while the others run on, so that it ends as it would alone
            done |= done_scores[:, -1] >= best_open
            if bool(done.all()):  # one synchronisation per step
                break
    else:
        step = steps - 1
    if eos_id is None:  # nothing finished: the best prefix, all its tokens (no read on the host)
        best = torch.arange(B, device=device) * K + scores.argmax(dim=-1)
        return ys[best, start:].to(inputs.device)
    # unfinished prefixes compete with the finished hypotheses at the length they reached
    length = step + 1
    open_tokens = F.pad(ys[:, start:], (0, steps - length), value=pad_id).reshape(B, K, steps)
    open_scores = (scores / penalty(length)).masked_fill(done[:, None], float("-inf"))  # (B, K)
    pool_scores = torch.cat([done_scores, open_scores], dim=1)  # (B, 2K)
    pool_tokens = torch.cat([done_tokens, open_tokens], dim=1)  # (B, 2K, steps)
    best = pool_scores.argmax(dim=1)  # ties: the finished hypothesis, listed first
    out = pool_tokens[torch.arange(B, device=device), best]  # (B, steps)
    # trim the padding columns no hypothesis of the batch uses
    used = int((out != pad_id).any(dim=0).nonzero().max().item()) + 1 if bool((out != pad_id).any()) else 1
    return out[:, :used].to(inputs.device)


def _ragged_loop(model, prompt: torch.Tensor, lengths: torch.Tensor, max_new: int, eos_id, pad_id, use_cache,
                 pick: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Continue right-padded prompts of different lengths in one batch, as Meta's reference Llama code
    does: decoding starts after the shortest prompt, and while position ``t`` still lies inside row
    ``b``'s prompt, the prompt's token replaces the model's choice. No row ever reads a pad."""
    device = _model_device(model, prompt.device)
    prompt, lengths = prompt.to(device), lengths.to(device)
    P, first = prompt.shape[1], int(lengths.min())
    state = model.start_decoding(prompt[:, :first])
    end = lengths + max_new  # (B,) where each row's tokens stop
    total = int(end.max())
    if use_cache:
        _reserve(state, total - 1)
    seq = torch.full((prompt.shape[0], total), pad_id, dtype=torch.long, device=device)  # filled in place
    seq[:, :first] = prompt[:, :first]
    finished = torch.zeros(prompt.shape[0], dtype=torch.bool, device=device)
    t = first
    for t in range(first, total):
        nxt = pick(model.decode_next(seq[:, :t], state, use_cache))  # (B,)
        if t < P:
            nxt = torch.where(t < lengths, prompt[:, t], nxt)  # still inside the prompt: copy it
        seq[:, t] = nxt.masked_fill(finished | (t >= end), pad_id)
        if eos_id is not None:
            finished |= (nxt == eos_id) & (t >= lengths)
        if bool((finished | (t + 1 >= end)).all()):
            break
    return seq[:, :t + 1]


def _left_padding(model, mask, prompt_ids: torch.Tensor, name: str = "prompt_ids") -> Optional[torch.Tensor]:
    """Check a Hugging Face attention mask of left-padded prompts (and that the model takes one); return
    it as bool, or None when it has no padding. Errors name the prompts ``name``."""
    start_decoding = getattr(model, "start_decoding", None)
    if start_decoding is None or "attention_mask" not in inspect.signature(start_decoding).parameters:
        raise ValueError(f"attention_mask: expected a model whose start_decoding takes one (e.g. DecoderOnlyLM), "
                         f"got {type(model).__name__}")
    if not isinstance(mask, torch.Tensor) or mask.shape != prompt_ids.shape:
        got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"attention_mask: expected shape {tuple(prompt_ids.shape)} as {name}, got {got}")
    if mask.dtype != torch.bool:
        if mask.dtype.is_floating_point or mask.dtype.is_complex or bool(((mask != 0) & (mask != 1)).any()):
            raise ValueError(f"attention_mask: expected bool or integer 0/1 values (1 = real token), got {mask.dtype} "
                             f"with values {sorted(set(mask.flatten().tolist()))[:6]}")
        mask = mask != 0
    empty = (~mask.any(dim=1)).nonzero()[:, 0].tolist()
    if empty:
        raise ValueError(f"attention_mask: expected at least one real token (1) in every row, got none in rows {empty}")
    if mask.shape[1] > 1:
        not_left = (mask[:, :-1] & ~mask[:, 1:]).any(dim=1).nonzero()[:, 0].tolist()  # a 1 followed by a 0
        if not_left:
            raise ValueError(f"attention_mask: expected left padding (0s, then 1s in every row), got a 0 after a 1 "
                             f"in rows {not_left}; for right-padded prompts give prompt_lengths instead")
    return None if bool(mask.all()) else mask


@torch.no_grad()
def generate(model, prompt_ids: torch.Tensor, max_new_tokens: Optional[int] = None, eos_id: Optional[int] = None,
             pad_id: Optional[int] = None, do_sample: bool = False, temperature: float = 1.0,
             top_k: Optional[int] = None, generator: Optional[torch.Generator] = None,
             use_cache: bool = True, prompt_lengths: Optional[torch.Tensor] = None, *,
             attention_mask: Optional[torch.Tensor] = None, top_p: Optional[float] = None) -> torch.Tensor:
    """Continue prompts with a decoder-only model: the prompt followed by the new tokens.

    Greedy by default, as Hugging Face's ``generate(do_sample=False)``, whose tokens it reproduces for
    a model loaded with :func:`tfmini.huggingface.from_huggingface`, including batches of prompts of
    different lengths padded on the left with an ``attention_mask``. Decoding uses the KV cache
    (``use_cache``): the prompt is read in one pass, then one position per step. A sequence that
    produces ``eos_id`` is padded with ``pad_id`` after it, and generation stops early when every
    sequence has.

    Args:
        model: a decoder-only tfmini model, e.g. :class:`~tfmini.model.DecoderOnlyLM` (in eval mode).
        prompt_ids: ``(B, P)`` token ids: every prompt has ``P`` real tokens, or prompts of different
            lengths padded on the left (with ``attention_mask``) or on the right (with ``prompt_lengths``).
        max_new_tokens: number of tokens to add, at most; ``P + max_new_tokens`` must fit in
            ``model.cfg.max_len`` (the positions the model has).
        eos_id: stop token (default: none, always ``max_new_tokens`` tokens).
        pad_id: written after a sequence's EOS (default ``model.cfg.pad_id``).
        do_sample: sample (:func:`sample`) instead of taking the argmax.
        temperature, top_k, top_p, generator: as in :func:`sample`; used only with ``do_sample=True``.
        use_cache: reuse keys and values of earlier positions (same tokens, less work).
        prompt_lengths: ``(B,)`` the real length of each right-padded prompt. Decoding starts after the
            shortest one and copies each longer prompt's tokens until it ends, so the model never
            reads a pad and greedy tokens equal those of each prompt continued alone. Row ``b`` of the
            result is its prompt, its new tokens, then ``pad_id``.
        attention_mask: ``(B, P)``, bool or integer 0/1 (Hugging Face's), 1 = real token: prompts padded
            on the left, as Hugging Face's tokenizers pad them for generation. Padding is never
            attended to and positions count real tokens only (``cumsum(mask) - 1``, as Hugging Face
            numbers them), so each row is continued as it would be alone. A keyword argument: the third
            positional one is ``max_new_tokens``.

    Returns:
        ``(B, P + L)`` ids, ``L <= max_new_tokens``, on the device of ``prompt_ids`` (with
        ``attention_mask``, the left-padded prompts, then the new tokens); with ``prompt_lengths``,
        ``(B, N)`` right-padded ids, ``N <= max(prompt_lengths) + max_new_tokens``.

    Shape:
        prompt_ids ``(B, P)`` -> ``(B, P + L)``.

    Raises:
        ValueError: a model that is not decoder-only; bad ``max_new_tokens``, ``prompt_ids``,
            ``prompt_lengths``, sampling settings; an ``attention_mask`` whose shape differs from
            ``prompt_ids``, that is not 0/1, has a row without a real token or is not left-padded;
            both ``attention_mask`` and ``prompt_lengths``.
    """
    if isinstance(max_new_tokens, torch.Tensor) and attention_mask is None:  # generate(model, ids, mask, ...)
        raise ValueError("max_new_tokens: expected an int >= 1, got a tensor; give the attention mask by name, "
                         "generate(model, prompt_ids, attention_mask=mask, max_new_tokens=n)")
    if not getattr(model, "decoder_only", False):
        raise ValueError(f"model: expected a decoder-only model (e.g. DecoderOnlyLM), got {type(model).__name__}; "
                         f"use greedy_decode, sample or beam_search for an encoder-decoder model")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
    if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 2 or 0 in prompt_ids.shape:
        got = tuple(prompt_ids.shape) if isinstance(prompt_ids, torch.Tensor) else type(prompt_ids).__name__
        raise ValueError(f"prompt_ids: expected non-empty token ids of shape (B, P), got {got}")
    cfg = getattr(model, "cfg", None)
    max_len = getattr(cfg, "max_len", None)
    if max_len is not None and prompt_ids.shape[1] + max_new_tokens > max_len:
        raise ValueError(f"max_new_tokens: expected prompt length + max_new_tokens <= max_len={max_len} "
                         f"(the model's positions), got {prompt_ids.shape[1]} + {max_new_tokens}")
    if pad_id is None:
        pad_id = getattr(cfg, "pad_id", 0)
    if do_sample:
        pick = _sampler(temperature, top_k, generator, top_p, hint="use do_sample=False for temperature 0")
    else:
        pick = lambda logits: logits.argmax(-1)  # noqa: E731
    mask = None
    if attention_mask is not None:
        if prompt_lengths is not None:
            raise ValueError("prompt_lengths: expected None with attention_mask (left padding) or the other way "
                             "round (right padding), got both")
        mask = _left_padding(model, attention_mask, prompt_ids)
    if prompt_lengths is not None:
        lengths = torch.as_tensor(prompt_lengths)
        if lengths.shape != (prompt_ids.shape[0],) or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
            raise ValueError(f"prompt_lengths: expected {prompt_ids.shape[0]} integer lengths, one per prompt, "
                             f"got {lengths.dtype} of shape {tuple(lengths.shape)}")
        if bool((lengths < 1).any()) or bool((lengths > prompt_ids.shape[1]).any()):
            raise ValueError(f"prompt_lengths: expected lengths in [1, {prompt_ids.shape[1]}] (the prompts' width), "
                             f"got {lengths.tolist()}")
        out = _ragged_loop(model, prompt_ids, lengths, max_new_tokens, eos_id, pad_id, use_cache, pick)
        return out.to(prompt_ids.device)
    new = _loop(model, prompt_ids, max_new_tokens, None, eos_id, pad_id, use_cache, pick, attention_mask=mask)
    return torch.cat([prompt_ids, new.to(prompt_ids.device)], dim=1)
