"""Exercises that check themselves: write a piece of a Transformer, and :func:`check` says whether it is right.

Modelled on Kaggle Learn's ``learntools``: each exercise has :func:`check`, :func:`hint` and
:func:`solution`. :func:`check` runs your function on random inputs of fixed seeds and on the edge
cases that break implementations (length 1, a fully masked row, a padded batch, float16 where it
matters), compares it with tfmini or with a reference written here, and prints what is wrong: the
case, the expected and actual shape or values, and the likely cause. Every verdict is deterministic.

A "Your turn" cell of a chapter looks like this::

    from tfmini.exercises import check, hint, solution

    def masked_softmax(scores, mask):
        raise NotImplementedError   # your code here

    check("masked_softmax", masked_softmax)

Until the body is written, ``check`` answers "not attempted yet". :func:`names` lists the exercises,
:func:`signature` describes the function each one expects, and :func:`stub` writes such a cell.

Conventions are tfmini's: batch-first tensors, masks bool with ``True`` = may attend, row vectors
(``Q = X @ W_Q`` with ``W_Q`` of shape ``(d, d_k)``), heads laid out as ``(B, H, T, Dh)`` with head ``h``
taking the columns ``h * Dh .. (h + 1) * Dh - 1``, RoPE in the half-split layout.
"""
from __future__ import annotations

import inspect
import math
import re
import textwrap
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn.functional as F

import tfmini

__all__ = ["names", "signature", "check", "hint", "solution", "stub"]


# --------------------------------------------------------------------------------------------------
# Machinery: failures, calls, comparisons
# --------------------------------------------------------------------------------------------------

class _Fail(Exception):
    """A wrong answer; the message is the verdict."""


class _Raised(Exception):
    """The learner's function raised: the case and the exception."""

    def __init__(self, case: str, exc: BaseException):
        super().__init__(case)
        self.case, self.exc = case, exc


def _fail(message: str):
    raise _Fail(message)


def _call(case: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except _Fail:
        raise
    except Exception as e:  # the learner's bug: report it with the case
        raise _Raised(case, e) from e


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape, scale: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _as_tensor(case: str, got, what: str) -> torch.Tensor:
    if got is None:
        _fail(f"{case}: {what} is None. Did you forget `return`?")
    if not isinstance(got, torch.Tensor):
        _fail(f"{case}: {what} should be a torch.Tensor, got {type(got).__name__}.")
    return got


def _same(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    if tuple(a.shape) != tuple(b.shape):
        return False
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return bool((a.bool() == b.bool()).all()) if a.dtype == b.dtype else False
    return bool(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True))


def _match(got: torch.Tensor, mistakes, atol: float, rtol: float) -> Optional[str]:
    """The message of the first known mistake whose output ``got`` reproduces."""
    for message, thunk in mistakes:
        try:
            wrong = thunk()
        except Exception:
            continue
        if isinstance(wrong, torch.Tensor) and _same(got, wrong, atol, rtol):
            return message
    return None


def _ratio(g: torch.Tensor, w: torch.Tensor) -> Optional[float]:
    """The constant ``c`` with ``g = c * w``, if there is one (and it is not 1)."""
    big = w.abs() > 1e-3 * max(w.abs().max().item(), 1e-12)
    if big.sum() < 2 or not torch.isfinite(g[big]).all():
        return None
    r = g[big] / w[big]
    c = r.median().item()
    if abs(c) < 1e-6 or abs(c - 1) < 1e-3:
        return None
    return c if (r - c).abs().max().item() < 1e-3 * abs(c) else None


def _index(t: torch.Tensor) -> tuple:
    return tuple(int(i) for i in torch.nonzero(t)[0])


def _compare(case: str, got, want: torch.Tensor, what: str = "the output", *, shape_names: str = "",
             mistakes: Sequence = (), atol: float = 1e-5, rtol: float = 1e-4, dtype=None,
             nan_hint: str = "") -> torch.Tensor:
    """Fail with a verdict unless ``got`` has ``want``'s shape and values (and ``dtype``, if given)."""
    got = _as_tensor(case, got, what)
    names = f" {shape_names}" if shape_names else ""
    if tuple(got.shape) != tuple(want.shape):
        msg = _match(got, mistakes, atol, rtol)
        _fail(f"{case}: {what}: expected shape {tuple(want.shape)}{names}, got {tuple(got.shape)}."
              + (f" {msg}" if msg else ""))
    if dtype is not None and got.dtype != dtype:
        _fail(f"{case}: {what}: expected dtype {dtype}, got {got.dtype}.")
    if want.dtype == torch.bool and got.dtype != torch.bool:
        same = _same(got.bool() if got.dtype != torch.bool else got, want, 0, 0)
        _fail(f"{case}: {what}: expected dtype torch.bool (True = may attend), got {got.dtype}"
              + (" - the pattern is right, only the dtype is not." if same and bool(((got == 0) | (got == 1)).all())
                 else "."))
    if _same(got, want, atol, rtol):
        return got
    msg = _match(got, mistakes, atol, rtol)
    if msg:
        _fail(f"{case}: {msg}")
    g, w = got.detach().cpu().double(), want.detach().cpu().double()
    if want.dtype == torch.bool:
        idx = _index(g != w)
        _fail(f"{case}: {what}: wrong at index {idx}: expected {bool(w[idx])}, got {bool(g[idx])} "
              f"({int((g != w).sum())} of {w.numel()} entries differ).")
    nan = torch.isnan(g) & ~torch.isnan(w)
    if nan.any():
        _fail(f"{case}: {what}: NaN (first at index {_index(nan)}) where a number was expected."
              + (f" {nan_hint}" if nan_hint else ""))
    inf = torch.isinf(g) & ~torch.isinf(w)
    if inf.any():
        _fail(f"{case}: {what}: inf (first at index {_index(inf)}) where a finite number was expected.")
    c = _ratio(g, w)
    if c is not None:
        _fail(f"{case}: {what}: off by a constant factor of about {_fmt(c)} (1/{_fmt(1 / c)}): "
              f"a missing or extra scale?")
    diff = (g - w).abs()
    idx = tuple(int(i) for i in torch.nonzero(diff == diff.max())[0])
    _fail(f"{case}: {what}: right shape {tuple(want.shape)}, wrong values: at index {idx} expected "
          f"{_fmt(w[idx].item())}, got {_fmt(g[idx].item())} (largest difference {_fmt(diff.max().item())}).")


def _pair(case: str, got, what: str = "the result", names: str = "(out, weights)") -> tuple:
    if got is None:
        _fail(f"{case}: {what} is None. Did you forget `return`? Return {names}.")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        _fail(f"{case}: expected a pair {names}, got {type(got).__name__}"
              + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "") + ".")
    return tuple(got)


# --------------------------------------------------------------------------------------------------
# The exercises: a reference solution and a checker for each
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Exercise:
    name: str
    chapter: int
    signature: str
    doc: str
    hint: str
    reference: Callable
    checker: Callable
    error_hint: Optional[Callable] = None


_EXERCISES: dict = {}


def _with_error_hint(name, error_hint):
    e = _EXERCISES[name]
    _EXERCISES[name] = _Exercise(e.name, e.chapter, e.signature, e.doc, e.hint, e.reference, e.checker, error_hint)


def _exercise(name, chapter, signature, doc, hint, reference, error_hint=None):
    def register(checker):
        _EXERCISES[name] = _Exercise(name, chapter, signature, doc, hint, reference, checker, error_hint)
        return checker
    return register


# ---- chapter 1: one LSTM step -------------------------------------------------------------------

def _sol_lstm_step(x, h, c, W_ih, W_hh, b_ih, b_hh):
    gates = x @ W_ih.T + b_ih + h @ W_hh.T + b_hh   # (B, 4 * Hd): all four pre-activations at once
    i, f, g, o = gates.chunk(4, dim=-1)             # PyTorch's order: input, forget, candidate, output
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c = f * c + i * g                               # forget some of the old cell, write some of the new
    h = o * torch.tanh(c)                           # read the new cell through the output gate
    return h, c


def _lstm_variant(x, h, c, W_ih, W_hh, b_ih, b_hh, order=(0, 1, 2, 3), g_act=torch.tanh, tanh_c=True,
                  new_c=True, input_gate=True, biases=2):
    gates = x @ W_ih.T + h @ W_hh.T + b_ih + (b_hh if biases == 2 else 0)
    parts = gates.chunk(4, dim=-1)
    i, f, g, o = (parts[k] for k in order)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), g_act(g), torch.sigmoid(o)
    c2 = f * c + (i * g if input_gate else g)
    cc = c2 if new_c else c
    return o * (torch.tanh(cc) if tanh_c else cc), c2


@_exercise(
    "lstm_step", 1,
    "lstm_step(x, h, c, W_ih, W_hh, b_ih, b_hh) -> (h, c)",
    "One LSTM step. x (B, E); h, c (B, Hd); W_ih (4Hd, E); W_hh (4Hd, Hd); b_ih, b_hh (4Hd,). The gates are "
    "stacked in nn.LSTMCell's order i, f, g, o. Returns the new (h, c), each (B, Hd).",
    "Compute all four pre-activations at once: gates = x @ W_ih.T + b_ih + h @ W_hh.T + b_hh, then "
    "gates.chunk(4, dim=-1) gives i, f, g, o in that order. i, f, o go through a sigmoid, the candidate g "
    "through tanh. Then c' = f * c + i * g and h' = o * tanh(c') - with the new cell c'.",
    _sol_lstm_step,
)
def _check_lstm_step(fn):
    import itertools
    cases = []
    for label, B, E, Hd, seed, zero in (("batch of 3, random state", 3, 5, 4, 0, False),
                                        ("batch of 1, zero state", 1, 3, 2, 1, True),
                                        ("large inputs (saturated gates)", 2, 4, 3, 2, False)):
        g = _gen(seed)
        scale = 3.0 if "large" in label else 1.0
        x = _randn(g, B, E, scale=scale)
        h = torch.zeros(B, Hd) if zero else _randn(g, B, Hd)
        c = torch.zeros(B, Hd) if zero else _randn(g, B, Hd)
        W_ih, W_hh = _randn(g, 4 * Hd, E, scale=0.7), _randn(g, 4 * Hd, Hd, scale=0.7)
        b_ih, b_hh = _randn(g, 4 * Hd, scale=0.5), _randn(g, 4 * Hd, scale=0.5)
        args = (x, h, c, W_ih, W_hh, b_ih, b_hh)
        cell = tfmini.LSTMCell(E, Hd)
        with torch.no_grad():
            for p, v in zip((cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh), args[3:]):
                p.copy_(v)
            want_h, want_c = cell(x, (h, c))
        case = f"case '{label}' (B={B}, E={E}, Hd={Hd})"
        got_h, got_c = _pair(case, _call(case, fn, *[a.clone() for a in args]), names="(h, c)")
        if (isinstance(got_h, torch.Tensor) and isinstance(got_c, torch.Tensor) and _same(got_h, want_c, 1e-5, 1e-4)
                and _same(got_c, want_h, 1e-5, 1e-4)):
            _fail(f"{case}: h and c are swapped: return (h, c), the hidden state first.")
        letters = "ifgo"
        mistakes = [("h and c are swapped: return (h, c), the hidden state first.",
                     lambda: want_c)]
        for order in itertools.permutations(range(4)):
            if order != (0, 1, 2, 3):
                mistakes.append((f"the gates are in the wrong order: you read the four chunks as {', '.join(letters[k] for k in order)}, "
                                 "but chunk(4) gives i, f, g, o (input, forget, candidate, output), PyTorch's order.",
                                 lambda order=order: _lstm_variant(*args, order=order)[1]))
        mistakes_c = mistakes + [
            ("the candidate g must go through tanh, not sigmoid.",
             lambda: _lstm_variant(*args, g_act=torch.sigmoid)[1]),
            ("the input gate i must scale the candidate: c' = f * c + i * g.",
             lambda: _lstm_variant(*args, input_gate=False)[1]),
            ("a bias is missing: both b_ih and b_hh are added to the pre-activations.",
             lambda: _lstm_variant(*args, biases=1)[1]),
        ]
        if not (isinstance(got_c, torch.Tensor) and _same(got_c, want_c, 1e-5, 1e-4)):
            _compare(case, got_c, want_c, "the new cell state c", shape_names="(B, Hd)", mistakes=mistakes_c)
        mistakes_h = [("h and c are swapped: return (h, c), the hidden state first.", lambda: want_c),
                      ("h' = o * tanh(c'): the tanh of the new cell state is missing.",
                       lambda: _lstm_variant(*args, tanh_c=False)[0]),
                      ("h' must read the new cell state c', not the old c.",
                       lambda: _lstm_variant(*args, new_c=False)[0])] + mistakes[1:]
        _compare(case, got_h, want_h, "the new hidden state h", shape_names="(B, Hd)", mistakes=mistakes_h)
        cases.append(label)
    return cases


# ---- chapter 2: the additive (Bahdanau) score ---------------------------------------------------

def _sol_additive_score(Q, K, W_q, W_k, b, w):
    hidden = torch.tanh((Q @ W_q)[:, :, None, :] + (K @ W_k)[:, None, :, :] + b)   # (B, T, S, Da)
    return hidden @ w                                                                # (B, T, S)


@_exercise(
    "additive_score", 2,
    "additive_score(Q, K, W_q, W_k, b, w) -> scores",
    "Bahdanau's additive score e_ij = tanh(q_i W_q + k_j W_k + b) w^T for every query and key. Q (B, T, Dq); "
    "K (B, S, Dk); W_q (Dq, Da); W_k (Dk, Da); b (Da,); w (Da,). Returns the scores (B, T, S).",
    "Project once: Q @ W_q is (B, T, Da) and K @ W_k is (B, S, Da). Add them with broadcasting, queries on "
    "axis 1 and keys on axis 2: (Q @ W_q)[:, :, None, :] + (K @ W_k)[:, None, :, :] is (B, T, S, Da). Add b, "
    "take tanh, then the product with w collapses the last axis.",
    _sol_additive_score,
)
def _check_additive_score(fn):
    cases = []
    for label, B, T, S, Dq, Dk, Da, seed in (("B=2, T=3 queries, S=5 keys", 2, 3, 5, 4, 6, 7, 0),
                                              ("one query, one key", 1, 1, 1, 3, 2, 4, 1),
                                              ("as many queries as keys, T=S=4", 2, 4, 4, 5, 5, 6, 2)):
        g = _gen(seed)
        Q, K = _randn(g, B, T, Dq), _randn(g, B, S, Dk)
        W_q, W_k, b, w = _randn(g, Dq, Da, scale=0.6), _randn(g, Dk, Da, scale=0.6), _randn(g, Da), _randn(g, Da)
        args = (Q, K, W_q, W_k, b, w)
        score = tfmini.AdditiveScore(Dq, Dk, Da)
        with torch.no_grad():
            score.W_q.weight.copy_(W_q.T)
            score.W_k.weight.copy_(W_k.T)
            score.W_k.bias.copy_(b)
            score.v.weight.copy_(w[None])
            want = score(Q, K)
        pre = lambda: (Q @ W_q)[:, :, None, :] + (K @ W_k)[:, None, :, :]  # noqa: E731
        mistakes = [
            ("queries and keys are swapped: row i of the result is query i, column j key j, (B, T, S).",
             lambda: want.transpose(1, 2)),
            ("the tanh is missing: e = tanh(q W_q + k W_k + b) w^T.", lambda: (pre() + b) @ w),
            ("the bias b goes inside the tanh.", lambda: torch.tanh(pre()) @ w + b.sum()),
            ("the bias b is missing.", lambda: torch.tanh(pre()) @ w),
            ("the hidden layer must be projected by w (a weighted sum), not summed.",
             lambda: torch.tanh(pre() + b).sum(-1)),
            ("tanh comes before the projection by w, not after.", lambda: torch.tanh((pre() + b) @ w)),
        ]
        case = f"case '{label}' (Dq={Dq}, Dk={Dk}, Da={Da})"
        got = _call(case, fn, *[a.clone() for a in args])
        _compare(case, got, want, "the scores", shape_names="(B, T, S)", mistakes=mistakes)
        cases.append(label)
    return cases


# ---- chapter 3: masked softmax ------------------------------------------------------------------

def _sol_masked_softmax(scores, mask):
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)   # finite: a fully masked row stays finite
    return filled.softmax(dim=-1).masked_fill(~mask, 0.0)               # forbidden keys get exactly zero


def _masked_softmax_cases():
    g = _gen(3)
    scores = _randn(g, 2, 3, 5, scale=2.0)
    mask = torch.rand(2, 3, 5, generator=g) < 0.6
    mask[..., 0] = True
    mask[0, 1] = torch.tensor([False, True, True, False, True])
    pad = torch.tensor([[True, True, True, True, False], [True, True, False, False, False]])[:, None, :]
    full = torch.ones(3, 4, dtype=torch.bool)
    full[1] = False  # a query that may attend to nothing
    half = torch.tensor([[[3.0, 300.0, -5.0, 2.0], [1.0, 2.0, 3.0, 4.0]]]).half()
    half_mask = torch.tensor([[[True, False, True, True], [False, True, True, False]]])
    return [
        ("random scores (2, 3, 5), random mask", scores, mask),
        ("padding mask (B, 1, S) broadcast over the queries", _randn(g, 2, 3, 5), pad),
        ("a fully masked row (query 1 may attend to nothing)", _randn(g, 3, 4), full),
        ("one key (S = 1)", _randn(g, 2, 1), torch.ones(2, 1, dtype=torch.bool)),
    ] + ([("float16 scores", half, half_mask)] if _half_softmax() else [])


def _half_softmax() -> bool:
    """Whether this torch has a float16 softmax on the CPU (torch 2.1 has none: the case is skipped)."""
    try:
        torch.zeros(2, dtype=torch.float16).softmax(-1)
    except RuntimeError:
        return False
    return True


@_exercise(
    "masked_softmax", 3,
    "masked_softmax(scores, mask) -> weights",
    "Softmax over the last axis (the keys) in which masked keys get exactly zero weight. scores (..., S) "
    "float; mask bool, broadcastable to scores, True = may attend. A row in which every key is masked gets "
    "all-zero weights (not NaN); float16 scores must work. Returns weights of the shape of scores.",
    "Fill the masked scores with a very negative but finite number before the softmax: "
    "scores.masked_fill(~mask, torch.finfo(scores.dtype).min). -inf turns a fully masked row into NaN, and "
    "-1e9 does not fit in float16. After softmax(dim=-1), set the masked weights to exactly 0 "
    "(masked_fill again): that also zeroes a fully masked row.",
    _sol_masked_softmax,
)
def _check_masked_softmax(fn):
    cases = []
    for label, scores, mask in _masked_softmax_cases():
        case = f"case '{label}'"
        want = tfmini.masked_softmax(scores, mask)
        got = _as_tensor(case, _call(case, fn, scores.clone(), mask.clone()), "the weights")
        if tuple(got.shape) != tuple(want.shape):
            _fail(f"{case}: the weights have shape {tuple(got.shape)}, expected {tuple(want.shape)} (the shape of scores).")
        m = torch.broadcast_to(mask, want.shape)
        gd = got.detach().double()
        rows_all_masked = ~m.any(-1)
        if torch.isnan(gd).any():
            where = "a fully masked row" if torch.isnan(gd[rows_all_masked]).any() else "the weights"
            _fail(f"{case}: NaN in {where}. Filling with -inf gives exp(-inf)/0 when every key is masked: fill with "
                  f"a finite number such as torch.finfo(scores.dtype).min, and zero the masked weights after the softmax.")
        if (gd[~m].abs() > 1e-6).any():
            plain = torch.softmax(scores.double(), -1)
            if _same(gd, plain, 1e-3, 1e-3):
                _fail(f"{case}: the mask has no effect: masked keys get weight. Apply it to the scores before the softmax.")
            if (gd[m & ~rows_all_masked[..., None]].abs() < 1e-6).all() or rows_all_masked.all():
                _fail(f"{case}: the weights fall on the masked keys and not on the allowed ones: True means "
                      f"*may attend* (mask polarity reversed? use ~mask to fill).")
            if rows_all_masked.any() and (gd[rows_all_masked].abs() > 1e-6).any():
                _fail(f"{case}: a fully masked row should get all-zero weights, got weights summing to "
                      f"{_fmt(gd[rows_all_masked].sum(-1).max().item())}: zero the masked weights after the softmax.")
            _fail(f"{case}: masked keys get weight (up to {_fmt(gd[~m].abs().max().item())}): True means may attend, "
                  f"and a masked key must get exactly 0.")
        sums = gd.sum(-1)
        ok_rows = ~rows_all_masked
        if ok_rows.any() and ((sums[ok_rows] - 1).abs() > 2e-3).any():
            if ((gd.sum(-2) - 1).abs() < 2e-3).all():
                _fail(f"{case}: the weights do not sum to 1 over the keys (the last axis) but over the queries: "
                      f"softmax over the wrong axis? Use dim=-1.")
            _fail(f"{case}: the weights of a row do not sum to 1 over the allowed keys (row sums from "
                  f"{_fmt(sums[ok_rows].min().item())} to {_fmt(sums[ok_rows].max().item())}): mask the scores before "
                  f"the softmax, not the weights after it, and softmax over dim=-1.")
        tol = 2e-3 if scores.dtype == torch.float16 else 1e-5
        _compare(case, got, want, "the weights", atol=tol, rtol=tol)
        cases.append(label)
    return cases


def _error_masked_softmax(exc):
    text = str(exc)
    if "overflow" in text or "Half" in text:
        return ("A fill value such as -1e9 does not fit in float16 (largest magnitude 65504): use "
                "torch.finfo(scores.dtype).min.")
    return None


_with_error_hint("masked_softmax", _error_masked_softmax)


# ---- chapter 4: scaled dot-product attention ----------------------------------------------------

def _sol_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])        # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)                          # each row sums to 1 over the keys
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)                    # a query that may see nothing: zeros
    return weights @ v, weights                                      # (..., T, Dv), (..., T, S)


def _attention_cases():
    g = _gen(4)
    causal = tfmini.causal_mask(4)
    dead = causal.clone()
    dead[2] = False
    pad = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, :]
    return [
        ("B=2, T=3 queries, S=5 keys, d_k=64, d_v=16, no mask",
         _randn(g, 2, 3, 64), _randn(g, 2, 5, 64), _randn(g, 2, 5, 16), None),
        ("padded batch: mask (B, 1, S)", _randn(g, 2, 3, 64), _randn(g, 2, 5, 64), _randn(g, 2, 5, 16), pad),
        ("heads axis (B, H, T, d_k) with a causal mask", _randn(g, 2, 2, 4, 64), _randn(g, 2, 2, 4, 64),
         _randn(g, 2, 2, 4, 16), causal),
        ("one query and one key (T = S = 1)", _randn(g, 1, 1, 64), _randn(g, 1, 1, 64), _randn(g, 1, 1, 16), None),
        ("a fully masked row (query 2 may attend to nothing)", _randn(g, 1, 4, 64), _randn(g, 1, 4, 64),
         _randn(g, 1, 4, 16), dead),
    ]


@_exercise(
    "attention", 4,
    "attention(q, k, v, mask=None) -> (out, weights)",
    "Scaled dot-product attention softmax(q k^T / sqrt(d_k)) v. q (..., T, Dk); k (..., S, Dk); v (..., S, Dv); "
    "mask None or bool broadcastable to (..., T, S), True = may attend. A query that may attend to nothing "
    "gets zero weights and a zero output. Returns out (..., T, Dv) and weights (..., T, S).",
    "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k), with d_k = q.shape[-1] (the key width, not the value "
    "width). Mask as in masked_softmax (finite fill, zero afterwards), softmax over the keys (dim=-1), then "
    "out = weights @ v. Transpose only the last two axes of k, so that batch and head axes stay in front.",
    _sol_attention,
)
def _check_attention(fn):
    cases = []
    for label, q, k, v, mask in _attention_cases():
        case = f"case '{label}'"
        want_out, want_w = tfmini.scaled_dot_product_attention(q, k, v, mask)
        out, w = _pair(case, _call(case, fn, q.clone(), k.clone(), v.clone(), None if mask is None else mask.clone()))
        raw = q @ k.transpose(-2, -1)
        dk, dv = q.shape[-1], v.shape[-1]

        def soft(s, dim=-1):
            return tfmini.masked_softmax(s, mask, dim=dim) if dim == -1 else torch.softmax(
                s.masked_fill(~mask, torch.finfo(s.dtype).min) if mask is not None else s, dim=dim)
        mistakes = [
            (f"the weights are those of unscaled scores: divide q k^T by sqrt(d_k) = {math.sqrt(dk):g} (missing the scale?).",
             lambda: soft(raw)),
            (f"the scores are divided by d_k = {dk}, not by sqrt(d_k) = {math.sqrt(dk):g}.", lambda: soft(raw / dk)),
            (f"the scores are divided by sqrt(d_v) = {math.sqrt(dv):g}: the scale is sqrt(d_k) = {math.sqrt(dk):g}, "
             f"the width of queries and keys.", lambda: soft(raw / math.sqrt(dv))),
            ("the weights sum to 1 over the queries, not over the keys: softmax over the wrong axis? Use dim=-1.",
             lambda: soft(raw / math.sqrt(dk), dim=-2)),
            ("the weights are transposed: (..., T, S), one row per query.", lambda: want_w.transpose(-2, -1)),
        ]
        if mask is not None:
            mistakes += [
                ("the weights fall on the masked keys: True means *may attend* (mask polarity reversed?).",
                 lambda: tfmini.masked_softmax(raw / math.sqrt(dk), ~mask)),
                ("the mask has no effect: masked keys get weight.", lambda: torch.softmax(raw / math.sqrt(dk), -1)),
            ]
        nan_hint = ("A query that may attend to nothing gives NaN with a -inf fill: fill with a finite number "
                    "(torch.finfo(dtype).min) and zero the masked weights after the softmax.")
        _compare(case, w, want_w, "the weights", shape_names="(..., T, S)", mistakes=mistakes, nan_hint=nan_hint)
        _compare(case, out, want_out, "the output", shape_names="(..., T, Dv)", nan_hint=nan_hint, mistakes=[
            ("the output is weights^T @ v or similar: out = weights @ v.", lambda: want_w.transpose(-2, -1) @ v)])
        cases.append(label)
    return cases


# ---- chapter 5: split and merge heads -----------------------------------------------------------

def _sol_split_heads(x, num_heads):
    B, T, D = x.shape
    return x.reshape(B, T, num_heads, D // num_heads).transpose(1, 2)   # (B, H, T, Dh)


def _sol_merge_heads(x):
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)                      # (B, T, H * Dh): [head_1; ...; head_H]


_HEAD_SHAPES = (("B=2, T=3, D=8, H=2", 2, 3, 8, 2, 0), ("one position, T=1, D=6, H=3", 1, 1, 6, 3, 1),
                ("T = H = 3, D=9", 2, 3, 9, 3, 2), ("one head, H=1", 2, 4, 4, 1, 3))


@_exercise(
    "split_heads", 5,
    "split_heads(x, num_heads) -> heads",
    "Split the width of x (B, T, D) into num_heads heads of width Dh = D / H: head h takes the columns "
    "h * Dh .. (h + 1) * Dh - 1. Returns (B, H, T, Dh).",
    "reshape to (B, T, H, Dh) first - the columns of one head are contiguous - then transpose(1, 2) to bring "
    "the heads in front of the positions. einops: rearrange(x, 'b t (h dh) -> b h t dh', h=H).",
    _sol_split_heads,
)
def _check_split_heads(fn):
    cases = []
    for label, B, T, D, H, seed in _HEAD_SHAPES:
        x = _randn(_gen(seed), B, T, D)
        Dh = D // H
        want = _sol_split_heads(x, H)
        case = f"case '{label}'"
        mistakes = [
            ("the transpose is missing: (B, T, H, Dh) must become (B, H, T, Dh) with transpose(1, 2).",
             lambda: x.reshape(B, T, H, Dh)),
            ("positions and heads are mixed: reshape to (B, T, H, Dh) first, then transpose(1, 2); a reshape "
             "straight to (B, H, T, Dh) cuts across positions.", lambda: x.reshape(B, H, T, Dh)),
            ("the columns of a head are interleaved (column j went to head j % H): head h takes the contiguous "
             "columns h*Dh .. (h+1)*Dh - 1, so reshape to (B, T, H, Dh), not (B, T, Dh, H).",
             lambda: x.reshape(B, T, Dh, H).permute(0, 3, 1, 2)),
            ("the heads axis went first: the result is (B, H, T, Dh), batch first.",
             lambda: x.reshape(B, T, H, Dh).permute(2, 0, 1, 3)),
        ]
        got = _call(case, fn, x.clone(), H)
        _compare(case, got, want, "the heads", shape_names="(B, H, T, Dh)", mistakes=mistakes)
        cases.append(label)
    return cases


@_exercise(
    "merge_heads", 5,
    "merge_heads(x) -> merged",
    "The inverse of split_heads: x (B, H, T, Dh) -> (B, T, H * Dh), the heads concatenated along the width "
    "[head_1; ...; head_H], so that head h fills the columns h * Dh .. (h + 1) * Dh - 1.",
    "transpose(1, 2) back to (B, T, H, Dh), then reshape to (B, T, H * Dh). A reshape without the transpose "
    "mixes positions. einops: rearrange(x, 'b h t dh -> b t (h dh)').",
    _sol_merge_heads,
)
def _check_merge_heads(fn):
    cases = []
    for label, B, T, D, H, seed in _HEAD_SHAPES:
        Dh = D // H
        x = _randn(_gen(seed + 10), B, H, T, Dh)
        want = _sol_merge_heads(x)
        case = f"case '{label}' (x of shape {(B, H, T, Dh)})"
        mistakes = [
            ("positions and heads are mixed: transpose(1, 2) back to (B, T, H, Dh) before the reshape.",
             lambda: x.reshape(B, T, H * Dh)),
            ("the heads are merged in the wrong order (column h + H*j instead of h*Dh + j): concatenate whole heads, "
             "[head_1; ...; head_H], i.e. reshape (B, T, H, Dh), not (B, T, Dh, H).",
             lambda: x.permute(0, 2, 3, 1).reshape(B, T, H * Dh)),
            ("the heads are summed: concatenate them along the width instead.", lambda: x.sum(1)),
            ("the heads are averaged: concatenate them along the width instead.", lambda: x.mean(1)),
            ("the heads are concatenated along the positions: concatenate them along the width (last axis).",
             lambda: torch.cat(x.unbind(1), dim=1)),
            ("the heads are in reverse order: head 1 fills the first Dh columns.",
             lambda: x.flip(1).transpose(1, 2).reshape(B, T, H * Dh)),
        ]
        got = _call(case, fn, x.clone())
        _compare(case, got, want, "the merged heads", shape_names="(B, T, H * Dh)", mistakes=mistakes)
        cases.append(label)
    return cases


# ---- chapter 6: the sinusoidal table ------------------------------------------------------------

def _sol_sinusoidal(max_len, d):
    p = torch.arange(max_len, dtype=torch.float64)[:, None]                # (max_len, 1) positions from 0
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,) frequencies 10000^(-2i/d)
    angle = p * omega                                                      # (max_len, d/2)
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)        # sin, cos, sin, cos, ...
    return pe.float()                                                      # (max_len, d)


def _sin_variant(max_len, d, *, swap=False, halves=False, exponent=2, sign=-1, start=0, base=10000.0):
    p = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]
    i = torch.arange(d // 2, dtype=torch.float64)
    angle = p * base ** (sign * exponent * i / d)
    a, b = (angle.cos(), angle.sin()) if swap else (angle.sin(), angle.cos())
    return torch.cat([a, b], -1) if halves else torch.stack([a, b], -1).flatten(1)


@_exercise(
    "sinusoidal", 6,
    "sinusoidal(max_len, d) -> table",
    "The sinusoidal positional table: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)) "
    "for positions p = 0 .. max_len - 1 and d even. Returns a float tensor (max_len, d).",
    "positions p = torch.arange(max_len)[:, None]; frequencies omega = 10000 ** (-torch.arange(0, d, 2) / d) "
    "(arange(0, d, 2) is already 2i); angle = p * omega is (max_len, d/2). Interleave: column 2i is the sine, "
    "column 2i+1 the cosine of the same angle - torch.stack([sin, cos], -1).flatten(1). Compute in float64.",
    _sol_sinusoidal,
)
def _check_sinusoidal(fn):
    cases = []
    for label, max_len, d in (("max_len=50, d=16", 50, 16), ("one position, d=2", 1, 2), ("max_len=7, d=6", 7, 6),
                              ("long: max_len=512, d=64", 512, 64)):
        case = f"case '{label}'"
        want = tfmini.sinusoidal_positional_encoding(max_len, d)
        got = _as_tensor(case, _call(case, fn, max_len, d), "the table")
        mistakes = [
            ("sin and cos are swapped: column 2i is the sine, 2i+1 the cosine.", lambda: _sin_variant(max_len, d, swap=True)),
            ("the sines and cosines are in two halves: they interleave, column 2i sin and 2i+1 cos "
             "(stack([sin, cos], -1).flatten(1), not cat).", lambda: _sin_variant(max_len, d, halves=True)),
            ("the frequencies are wrong: 10000^(-2i/d) with i = 0 .. d/2 - 1 (you used i/d?).",
             lambda: _sin_variant(max_len, d, exponent=1)),
            ("the frequencies are wrong: 10000^(-2i/d) with 2i = 0, 2, 4, ... (you doubled 2i?).",
             lambda: _sin_variant(max_len, d, exponent=4)),
            ("the exponent has the wrong sign: the frequencies 10000^(-2i/d) fall with i, the wavelengths grow.",
             lambda: _sin_variant(max_len, d, sign=1)),
            ("positions count from 0: row 0 is position 0, [0, 1, 0, 1, ...].", lambda: _sin_variant(max_len, d, start=1)),
        ]
        if tuple(got.shape) == (max_len, d) and not got.dtype.is_floating_point:
            _fail(f"{case}: the table has dtype {got.dtype}, expected a float dtype.")
        _compare(case, got, want, "the table", shape_names="(max_len, d)", mistakes=mistakes, atol=1e-4, rtol=1e-4)
        cases.append(label)
    return cases


# ---- chapter 7: LayerNorm -----------------------------------------------------------------------

def _sol_layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=False, keepdim=True)        # biased: divide by D, like nn.LayerNorm
    return gamma * (x - mu) / torch.sqrt(var + eps) + beta


@_exercise(
    "layer_norm", 7,
    "layer_norm(x, gamma, beta, eps=1e-5) -> y",
    "LayerNorm over the last axis: y = gamma * (x - mean) / sqrt(var + eps) + beta, with the mean and the biased "
    "variance of each position's D features. x (..., D); gamma, beta (D,). Returns y of the shape of x.",
    "mean and variance over dim=-1 with keepdim=True, so they broadcast back. The variance is the biased one, "
    "x.var(dim=-1, unbiased=False) (divide by D), as nn.LayerNorm. eps goes inside the square root.",
    _sol_layer_norm,
)
def _check_layer_norm(fn):
    cases = []
    g = _gen(7)
    for label, x, eps in (("B=2, T=3, D=8", _randn(g, 2, 3, 8, scale=2.0) + 1.0, 1e-5),
                          ("nearly constant features (eps matters)", 0.5 + _randn(g, 2, 6, scale=1e-3), 1e-5),
                          ("width one, D=1", _randn(g, 3, 1), 1e-5),
                          ("eps=0.1", _randn(g, 4, 5), 0.1)):
        D = x.shape[-1]
        gamma, beta = 1 + _randn(g, D, scale=0.3), _randn(g, D, scale=0.3)
        case = f"case '{label}' (x {tuple(x.shape)})"
        want = F.layer_norm(x, (D,), gamma, beta, eps)
        mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        mistakes = [
            ("the variance is the unbiased one (divides by D - 1): LayerNorm uses the biased variance, "
             "x.var(dim=-1, unbiased=False), as nn.LayerNorm.",
             lambda: gamma * (x - mu) / torch.sqrt(x.var(-1, keepdim=True) + eps) + beta),
            ("eps goes inside the square root: sqrt(var + eps), not sqrt(var) + eps.",
             lambda: gamma * (x - mu) / (var.sqrt() + eps) + beta),
            ("the mean is not subtracted: LayerNorm centres each position's features.",
             lambda: gamma * x / torch.sqrt(var + eps) + beta),
            ("beta is missing.", lambda: gamma * (x - mu) / torch.sqrt(var + eps)),
            ("gamma is missing.", lambda: (x - mu) / torch.sqrt(var + eps) + beta),
            ("gamma and beta are swapped: gamma scales, beta shifts.",
             lambda: beta * (x - mu) / torch.sqrt(var + eps) + gamma),
            ("normalised over the wrong axis: each position is normalised over its own D features (dim=-1).",
             lambda: gamma * (x - x.mean(0, keepdim=True)) / torch.sqrt(x.var(0, unbiased=False, keepdim=True) + eps) + beta),
            ("normalised over the wrong axis: each position is normalised over its own D features (dim=-1).",
             lambda: gamma * (x - x.mean(-2, keepdim=True)) / torch.sqrt(x.var(-2, unbiased=False, keepdim=True) + eps) + beta),
        ]
        got = _call(case, fn, x.clone(), gamma.clone(), beta.clone(), eps)
        _compare(case, got, want, "the output", mistakes=mistakes, atol=1e-4, rtol=1e-4,
                 nan_hint="With D = 1 the unbiased variance divides by D - 1 = 0: use unbiased=False.")
        cases.append(label)
    return cases


# ---- chapter 8: masks ---------------------------------------------------------------------------

def _sol_causal_mask(T, S=None):
    S = T if S is None else S
    return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)   # query t sees keys 0 .. S - T + t


@_exercise(
    "causal_mask", 8,
    "causal_mask(T, S=None) -> mask",
    "The causal mask: bool (T, S), True = may attend, query t may see keys 0..t and nothing later. S defaults "
    "to T; with S > T (a KV cache) the T queries are the last T of the S positions, so query t sees keys "
    "0 .. S - T + t.",
    "torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T): tril keeps the diagonal and below (the past and "
    "the present). triu would keep the future. With S = T the diagonal offset is 0.",
    _sol_causal_mask,
)
def _check_causal_mask(fn):
    cases = []
    for label, T, S in (("T=4", 4, None), ("one position, T=1", 1, None), ("T=5", 5, None),
                        ("with a cache: T=3 queries, S=5 keys", 3, 5), ("one new query, S=6 keys", 1, 6)):
        case = f"case '{label}'"
        want = tfmini.causal_mask(T, S)
        S_ = want.shape[1]
        args = (T,) if S is None else (T, S)
        got = _call(case, fn, *args)
        ones = torch.ones(T, S_, dtype=torch.bool)
        mistakes = [
            ("the mask is transposed: row t (a query) allows columns t .. S-1, the future. Query t may see keys "
             "0..t: tril, not triu.", lambda: want.T),
            ("the mask is transposed: row t (a query) allows columns t .. S-1, the future. Query t may see keys "
             "0..t: tril, not triu.", lambda: ones.triu(S_ - T)),
            ("True means *may attend*: your mask is True on the future (polarity reversed?).", lambda: ~want),
            ("each query must see its own key: the diagonal is True (tril with diagonal 0, not -1).",
             lambda: ones.tril(S_ - T - 1)),
            ("with S > T the queries are the last T positions: query t sees keys 0 .. S - T + t "
             "(tril(diagonal=S - T)).", lambda: ones.tril(0)),
            ("every key is allowed: the causal mask hides the future.", lambda: ones),
        ]
        _compare(case, got, want, "the mask", shape_names="(T, S)", mistakes=mistakes)
        cases.append(label)
    return cases


def _sol_padding_mask(ids, pad_id):
    return (ids != pad_id)[:, None, None, :]   # (B, 1, 1, S): True at real keys, for every head and query


@_exercise(
    "padding_mask", 8,
    "padding_mask(ids, pad_id) -> mask",
    "The key-padding mask of a right-padded batch ids (B, S): bool (B, 1, 1, S), True at real tokens, so that "
    "it broadcasts against attention scores (B, H, T, S) and hides the padded keys from every head and query.",
    "ids != pad_id is True at real tokens (B, S). Add the head and query axes in front of the key axis: "
    "mask[:, None, None, :]. The key axis is the last one.",
    _sol_padding_mask,
)
def _check_padding_mask(fn):
    cases = []
    for label, ids, pad in (
            ("padded batch, pad_id=0", torch.tensor([[5, 6, 7, 8, 9], [4, 3, 0, 0, 0], [7, 7, 7, 0, 0]]), 0),
            ("pad_id=3, ids on both sides of it", torch.tensor([[1, 0, 5, 2, 3, 3], [6, 4, 3, 3, 3, 3]]), 3),
            ("no padding", torch.tensor([[2, 4, 6], [1, 1, 1]]), 0),
            ("one token, B=1, S=1", torch.tensor([[9]]), 0)):
        case = f"case '{label}' (ids {tuple(ids.shape)})"
        want = (ids != pad)[:, None, None, :]
        got = _call(case, fn, ids.clone(), pad)
        mistakes = [
            ("True means *may attend*: your mask is True at the padding (polarity reversed?).", lambda: ~want),
            ("the mask must broadcast against scores (B, H, T, S): add the head and query axes, mask[:, None, None, :].",
             lambda: ids != pad),
            ("the mask hides queries instead of keys: the key axis is the last one, (B, 1, 1, S), not (B, 1, S, 1).",
             lambda: (ids != pad)[:, None, :, None]),
            ("compare with pad_id, not with 0.", lambda: (ids != 0)[:, None, None, :]),
            ("ids > pad_id misses the real tokens whose id is below pad_id: use ids != pad_id.",
             lambda: (ids > pad)[:, None, None, :]),
        ]
        _compare(case, got, want, "the mask", shape_names="(B, 1, 1, S)", mistakes=mistakes)
        cases.append(label)
    return cases


# ---- chapter 8/9: cross-attention ---------------------------------------------------------------

def _sol_cross_attention(x, memory, memory_pad, W_Q, W_K, W_V, W_O, num_heads):
    B, T, D = x.shape
    S = memory.shape[1]
    q = (x @ W_Q).reshape(B, T, num_heads, -1).transpose(1, 2)        # (B, H, T, Dh): queries from the decoder
    k = (memory @ W_K).reshape(B, S, num_heads, -1).transpose(1, 2)   # (B, H, S, Dh): keys from the encoder
    v = (memory @ W_V).reshape(B, S, num_heads, -1).transpose(1, 2)   # (B, H, S, Dh)
    mask = memory_pad[:, None, None, :]                               # (B, 1, 1, S): hide padded source keys
    heads, weights = tfmini.scaled_dot_product_attention(q, k, v, mask)
    return heads.transpose(1, 2).reshape(B, T, -1) @ W_O, weights     # (B, T, D), (B, H, T, S)


def _cross_variant(x, memory, memory_pad, W_Q, W_K, W_V, W_O, H, *, kv_from_x=False, q_from_memory=False,
                   mask="pad", scale=True, merge="hd"):
    qs = memory if q_from_memory else x
    kvs = x if kv_from_x else memory
    B, T, S = qs.shape[0], qs.shape[1], kvs.shape[1]
    q = (qs @ W_Q).reshape(B, T, H, -1).transpose(1, 2)
    k = (kvs @ W_K).reshape(B, S, H, -1).transpose(1, 2)
    v = (kvs @ W_V).reshape(B, S, H, -1).transpose(1, 2)
    if not scale:
        q = q * math.sqrt(q.shape[-1])
    m = {"pad": memory_pad[:, None, None, :], "inverted": ~memory_pad[:, None, None, :], "none": None}.get(mask)
    if mask == "causal":
        m = memory_pad[:, None, None, :] & tfmini.causal_mask(T, S) if T <= S else None
    if mask == "causal0":
        m = memory_pad[:, None, None, :] & torch.ones(T, S, dtype=torch.bool).tril()
    out, w = tfmini.scaled_dot_product_attention(q, k, v, m)
    if merge == "dh":
        out = out.permute(0, 2, 3, 1).reshape(B, T, -1)
    else:
        out = out.transpose(1, 2).reshape(B, T, -1)
    return out @ W_O, w


@_exercise(
    "cross_attention", 9,
    "cross_attention(x, memory, memory_pad, W_Q, W_K, W_V, W_O, num_heads) -> (out, weights)",
    "A decoder layer's cross-attention: the queries come from the decoder's x (B, T, D), the keys and values "
    "from the encoder's output memory (B, S, D); memory_pad bool (B, S) is True at real source tokens. "
    "W_Q, W_K, W_V, W_O (D, D), no biases; num_heads heads of width D / H. Returns out (B, T, D) and the "
    "weights (B, H, T, S).",
    "q = x @ W_Q, k = memory @ W_K, v = memory @ W_V, each split into heads (B, H, ., Dh). The mask hides padded "
    "source keys: memory_pad[:, None, None, :]. There is no causal mask in cross-attention: every target "
    "position may read the whole source. Attend (tfmini.scaled_dot_product_attention), merge the heads back "
    "(transpose(1, 2), reshape) and multiply by W_O.",
    _sol_cross_attention,
)
def _check_cross_attention(fn):
    cases = []
    for label, B, T, S, D, H, lengths, seed in (
            ("B=2, T=3, S=5, D=8, H=2, padded source", 2, 3, 5, 8, 2, (5, 3), 0),
            ("one decoding step, T=1", 2, 1, 4, 8, 2, (2, 4), 1),
            ("no padding, T=4 > S=3", 1, 4, 3, 6, 3, (3,), 2),
            ("one head, H=1", 2, 2, 5, 4, 1, (5, 1), 3)):
        g = _gen(seed + 20)
        x, memory = _randn(g, B, T, D), _randn(g, B, S, D)
        memory_pad = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]
        Ws = [_randn(g, D, D, scale=D ** -0.5) for _ in range(4)]
        args = (x, memory, memory_pad, *Ws, H)
        want_out, want_w = _cross_variant(*args)
        case = f"case '{label}'"
        out, w = _pair(case, _call(case, fn, x.clone(), memory.clone(), memory_pad.clone(), *[W.clone() for W in Ws], H))
        v = lambda i, **kw: (lambda: _cross_variant(*args, **kw)[i])  # noqa: E731
        mw = [
            ("the keys and values must come from memory (the encoder's output), not from x.", v(1, kv_from_x=True)),
            ("the queries must come from x (the decoder), the keys and values from memory.", v(1, q_from_memory=True)),
            ("the weights fall on the padded source positions: True in memory_pad is a real token (mask polarity reversed?).",
             v(1, mask="inverted")),
            ("padded source positions get weight: hide them with memory_pad[:, None, None, :].", v(1, mask="none")),
            ("cross-attention has no causal mask: every target position may read every source position.", v(1, mask="causal")),
            ("cross-attention has no causal mask: every target position may read every source position.", v(1, mask="causal0")),
            ("the weights are those of unscaled scores: divide by sqrt(Dh), the head width (missing the scale?).",
             v(1, scale=False)),
        ]
        mo = [
            ("the keys and values must come from memory (the encoder's output), not from x.", v(0, kv_from_x=True)),
            ("the queries must come from x (the decoder), the keys and values from memory.", v(0, q_from_memory=True)),
            ("the heads are merged in the wrong order: concatenate whole heads [head_1; ...; head_H] "
             "(transpose(1, 2) then reshape), before W_O.", v(0, merge="dh")),
        ]
        if isinstance(w, torch.Tensor) and tuple(w.shape) == tuple(want_w.shape):
            leak = w.detach()[~memory_pad[:, None, None, :].expand_as(w)]
            if leak.numel() and (leak.abs() > 1e-6).any() and not _match(w, mw[:2] + mw[4:], 1e-5, 1e-4):
                msg = _match(w, mw, 1e-5, 1e-4) or "padded source positions get weight: hide them with memory_pad[:, None, None, :]."
                _fail(f"{case}: {msg}")
        _compare(case, w, want_w, "the weights", shape_names="(B, H, T, S)", mistakes=mw)
        _compare(case, out, want_out, "the output", shape_names="(B, T, D)", mistakes=mo)
        cases.append(label)
    return cases


def _error_cross_attention(exc):
    if "broadcastable" in str(exc) or "size of tensor" in str(exc):
        return ("Shapes that do not fit often mean the wrong tensor feeds a projection: the queries come from x "
                "(T positions), the keys and values must come from memory (S positions), and the mask "
                "memory_pad[:, None, None, :] covers the S keys.")
    return None


_with_error_hint("cross_attention", _error_cross_attention)


# ---- chapter 10: greedy decoding, the KV cache, a beam-search step ------------------------------

_BOS, _EOS, _PAD, _LOST = 1, 2, 0, 7
_CHAINS = {(1, 4): [6, 3, 2], (1, 3): [5, 5, 6, 4, 2], (1, 5): [3, 4, 6, 6, 5, 3, 4, 6, 5, 3]}


def _make_step(seed: int = 11):
    """A fake model: step(ys (B, t)) -> logits (B, V=8). Each prompt continues along a fixed chain of tokens
    while the prefix follows it, and produces token 7 (lost) once the prefix leaves it."""
    table = {}
    for start, chain in _CHAINS.items():
        prefix = list(start)
        for tok in chain:
            table[tuple(prefix)] = tok
            prefix.append(tok)
    noise = torch.rand(64, 8, generator=_gen(seed))
    calls = []

    def step(ys):
        if not isinstance(ys, torch.Tensor) or ys.dim() != 2 or ys.dtype != torch.long:
            got = f"{ys.dtype} of shape {tuple(ys.shape)}" if isinstance(ys, torch.Tensor) else type(ys).__name__
            raise ValueError(f"step: expected the prefix ys as a long tensor (B, t), got {got}")
        calls.append(ys.shape[1])
        logits = noise[torch.arange(ys.shape[0]) % 64 + ys.shape[1]].clone()
        for b, row in enumerate(ys.tolist()):
            logits[b, table.get(tuple(row), _LOST)] += 5.0
        return logits

    step.calls = calls
    return step


def _sol_greedy(step, ys, max_new_tokens, eos_id, pad_id):
    start = ys.shape[1]
    done = torch.zeros(ys.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        nxt = step(ys).argmax(dim=-1)                    # (B,) the most probable next token of each row
        nxt = nxt.masked_fill(done, pad_id)              # a finished row gets padding
        ys = torch.cat([ys, nxt[:, None]], dim=1)        # feed it back: the next step sees it
        done |= nxt == eos_id
        if done.all():                                   # stop once every row has produced EOS
            break
    return ys[:, start:]                                 # only the new tokens (B, L)


def _greedy_variant(step, ys, n, eos, pad, *, feed=True, pad_after=True, stop="all", keep_prefix=False,
                    steps_delta=0, pick="argmax"):
    start, cur = ys.shape[1], ys
    done = torch.zeros(ys.shape[0], dtype=torch.bool)
    outs = []
    for _ in range(n + steps_delta):
        logits = step(cur if feed else ys)
        nxt = logits.argmax(-1) if pick == "argmax" else logits.argmin(-1)
        if pad_after:
            nxt = nxt.masked_fill(done, pad)
        cur = torch.cat([cur, nxt[:, None]], 1)
        outs.append(nxt)
        done |= nxt == eos
        if stop == "all" and done.all() or stop == "any" and done.any():
            break
    return cur if keep_prefix else cur[:, start:]


@_exercise(
    "greedy", 10,
    "greedy(step, ys, max_new_tokens, eos_id, pad_id) -> tokens",
    "Greedy decoding with a step function: step(ys) returns the logits (B, V) of the next token after the "
    "prefix ys (B, t) (long). Starting from ys (BOS or a prompt), append the most probable token at most "
    "max_new_tokens times. A row that has produced eos_id gets pad_id from then on; stop early once every row "
    "has. Returns only the new tokens, (B, L) with L <= max_new_tokens.",
    "Loop: nxt = step(ys).argmax(dim=-1), one token per row (B,); replace it by pad_id in rows already done "
    "(masked_fill); ys = torch.cat([ys, nxt[:, None]], dim=1) so that the next step sees it; update "
    "done |= nxt == eos_id and break when done.all(). Return ys[:, start:].",
    _sol_greedy,
)
def _check_greedy(fn):
    cases = []
    for label, prompts, n in (("three rows, one never ends, max_new_tokens=8", [[1, 4], [1, 3], [1, 5]], 8),
                              ("every row ends early, max_new_tokens=8", [[1, 4], [1, 3]], 8),
                              ("one token, max_new_tokens=1", [[1, 5]], 1),
                              ("cut before EOS, max_new_tokens=3", [[1, 3], [1, 4]], 3)):
        ys = torch.tensor(prompts)
        case = f"case '{label}' (prompts {prompts}, eos_id={_EOS}, pad_id={_PAD})"
        want = _sol_greedy(_make_step(), ys, n, _EOS, _PAD)
        got = _call(case, fn, _make_step(), ys.clone(), n, _EOS, _PAD)
        s = _make_step
        mistakes = [
            ("each step must see the tokens chosen so far: append the new token to ys and pass the longer ys to step.",
             lambda: _greedy_variant(s(), ys, n, _EOS, _PAD, feed=False)),
            ("after a row produces EOS it must get pad_id: masked_fill the new tokens of finished rows.",
             lambda: _greedy_variant(s(), ys, n, _EOS, _PAD, pad_after=False)),
            ("decoding stopped when the first row produced EOS: stop only when every row has (done.all()).",
             lambda: _greedy_variant(s(), ys, n, _EOS, _PAD, stop="any")),
            ("decoding did not stop once every row had produced EOS: break when done.all().",
             lambda: _greedy_variant(s(), ys, n, _EOS, _PAD, stop="never")),
            ("return only the new tokens, not the prefix ys: ys[:, start:].",
             lambda: _greedy_variant(s(), ys, n, _EOS, _PAD, keep_prefix=True)),
            ("one token too few: generate up to max_new_tokens tokens.",
             lambda: _greedy_variant(s(), ys, n, _EOS, _PAD, steps_delta=-1)),
            ("one token too many: generate at most max_new_tokens tokens.",
             lambda: _greedy_variant(s(), ys, n, _EOS, _PAD, steps_delta=1)),
            ("the least probable token was picked: greedy takes the argmax.",
             lambda: _greedy_variant(s(), ys, n, _EOS, _PAD, pick="argmin")),
        ]
        if isinstance(got, torch.Tensor) and got.dtype.is_floating_point:
            _fail(f"{case}: the tokens have dtype {got.dtype}: return token ids (long), e.g. from argmax.")
        _compare(case, got, want, "the generated tokens", shape_names="(B, L)", mistakes=mistakes)
        cases.append(label)
    return cases


def _sol_kv_cache_step(q, k, v, cache_k, cache_v, t):
    cache_k[:, :, t] = k[:, :, 0]                        # write the new key and value at position t
    cache_v[:, :, t] = v[:, :, 0]
    keys, values = cache_k[:, :, :t + 1], cache_v[:, :, :t + 1]   # positions 0 .. t, the new one included
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, 1, t + 1)
    return torch.softmax(scores, dim=-1) @ values                 # (B, H, 1, Dh)


def _attend(q, keys, values, scale=True):
    s = q @ keys.transpose(-2, -1)
    if scale:
        s = s / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ values


@_exercise(
    "kv_cache_step", 10,
    "kv_cache_step(q, k, v, cache_k, cache_v, t) -> out",
    "One decoding step with a preallocated KV cache. q, k, v (B, H, 1, Dh) belong to the new position t; "
    "cache_k, cache_v (B, H, L, Dh) hold positions 0 .. t-1 (later slots are garbage). Write k and v into slot "
    "t of the caches, in place, then attend the query to positions 0 .. t. Returns out (B, H, 1, Dh).",
    "cache_k[:, :, t] = k[:, :, 0] writes in place (same for v). The query sees the keys cache_k[:, :, :t + 1] "
    "- the new position included, the unwritten slots after it excluded. Then scaled dot-product attention: "
    "softmax(q keys^T / sqrt(Dh)) values.",
    _sol_kv_cache_step,
)
def _check_kv_cache_step(fn):
    cases = []
    for label, B, H, L, Dh, steps, seed in (("B=2, H=2, four steps t = 0..3 into a cache of L=6", 2, 2, 6, 8, 4, 0),
                                            ("a cache filled to its last slot, t = 0..2 with L=3", 1, 1, 3, 4, 3, 1)):
        g = _gen(seed + 30)
        garbage = 50.0
        cache_k = torch.full((B, H, L, Dh), garbage)
        cache_v = torch.full((B, H, L, Dh), -garbage)
        ref_k, ref_v = cache_k.clone(), cache_v.clone()
        for t in range(steps):
            q, k, v = (_randn(g, B, H, 1, Dh) for _ in range(3))
            case = f"case '{label}', step t={t}"
            before_k, before_v = cache_k.clone(), cache_v.clone()
            want = _sol_kv_cache_step(q, k, v, ref_k, ref_v, t)
            got = _call(case, fn, q.clone(), k.clone(), v.clone(), cache_k, cache_v, t)
            for name, cache, new, before in (("cache_k", cache_k, k, before_k), ("cache_v", cache_v, v, before_v)):
                slot = cache[:, :, t:t + 1]
                if not torch.equal(slot, new):
                    if torch.equal(slot, before[:, :, t:t + 1]):
                        where = [p for p in range(L) if p != t and torch.equal(cache[:, :, p:p + 1], new)]
                        if where:
                            _fail(f"{case}: {name} got the new entry at position {where[0]} instead of t={t}: "
                                  f"an off-by-one cache position? Write at index t.")
                        if name == "cache_k" and torch.equal(cache_v[:, :, t:t + 1], k):
                            _fail(f"{case}: the new key was written into cache_v: k goes to cache_k, v to cache_v.")
                        _fail(f"{case}: {name}[:, :, t] was not updated in place: write the new entry with "
                              f"{name}[:, :, t] = ..., so that the next step finds it.")
                    if name == "cache_k" and torch.equal(slot, v):
                        _fail(f"{case}: the new value was written into cache_k: k goes to cache_k, v to cache_v.")
                    _fail(f"{case}: {name}[:, :, {t}] holds something else than the new entry.")
                others = [p for p in range(L) if p != t and not torch.equal(cache[:, :, p], before[:, :, p])]
                if others:
                    _fail(f"{case}: {name} changed at position {others[0]}: only slot t={t} should be written.")
            mistakes = [
                ("the query must also see its own new key: attend to positions 0..t (slice :t + 1), not :t.",
                 lambda: _attend(q, ref_k[:, :, :t], ref_v[:, :, :t])),
                ("the query attended to unwritten slots of the cache: only positions 0..t exist (slice :t + 1).",
                 lambda: _attend(q, ref_k, ref_v)),
                ("the query attended to one slot past t: positions 0..t are cache[:, :, :t + 1].",
                 lambda: _attend(q, ref_k[:, :, :t + 2], ref_v[:, :, :t + 2])),
                ("the scores are not scaled: divide by sqrt(Dh).", lambda: _attend(q, ref_k[:, :, :t + 1], ref_v[:, :, :t + 1], False)),
            ]
            _compare(case, got, want, "the output", shape_names="(B, H, 1, Dh)", mistakes=mistakes)
        cases.append(label)
    return cases


def _sol_beam_step(ys, scores, logp):
    B, K, V = logp.shape
    cand = scores[:, :, None] + logp                         # (B, K, V) total log-probability of each extension
    scores, idx = cand.reshape(B, K * V).topk(K, dim=-1)     # the K best of all K*V, per batch element
    beam, token = idx // V, idx % V                          # which beam it extends, and with which token
    prefixes = ys.gather(1, beam[:, :, None].expand(-1, -1, ys.shape[2]))   # reorder: (B, K, t)
    return torch.cat([prefixes, token[:, :, None]], dim=-1), scores          # (B, K, t + 1), (B, K)


def _beam_variant(ys, scores, logp, *, swap=False, add=True, reorder=True, per_beam=False, whole_batch=False):
    B, K, V = logp.shape
    cand = (scores[:, :, None] + logp) if add else logp.clone()
    if whole_batch:
        new, idx = cand.reshape(B * K * V).topk(B * K)
        new, idx = new.reshape(B, K), idx.reshape(B, K)
        batch, beam, token = idx // (K * V), idx % (K * V) // V, idx % V
        pre = ys[batch, beam]
        return torch.cat([pre, token[:, :, None]], -1), new
    if per_beam:
        s, tok = cand.max(-1)
        order = s.argsort(-1, descending=True)
        beam, token, new = order, tok.gather(1, order), s.gather(1, order)
    else:
        new, idx = cand.reshape(B, K * V).topk(K, dim=-1)
        beam, token = (idx % V, idx // V) if swap else (idx // V, idx % V)
    if not add:
        new = scores.gather(1, beam) + new
    pre = ys.gather(1, beam[:, :, None].expand(-1, -1, ys.shape[2])) if reorder else ys
    return torch.cat([pre, token[:, :, None]], -1), new


@_exercise(
    "beam_step", 10,
    "beam_step(ys, scores, logp) -> (ys, scores)",
    "One step of beam search. ys (B, K, t) long: the K prefixes of each batch element; scores (B, K): their "
    "total log-probabilities; logp (B, K, V): the log-probabilities of the next token after each prefix. "
    "Keep the K best of the K * V extensions of each batch element, best first. Returns the new prefixes "
    "(B, K, t + 1), each the prefix it extends followed by its token, and their scores (B, K).",
    "cand = scores[:, :, None] + logp, then cand.reshape(B, K * V).topk(K, dim=-1) gives the scores and flat "
    "indices idx in [0, K*V). The beam is idx // V and the token idx % V. Reorder the prefixes with the beam "
    "(ys.gather(1, beam[:, :, None].expand(-1, -1, t))) before appending the tokens.",
    _sol_beam_step,
)
def _check_beam_step(fn):
    cases = []
    for label, B, K, V, t, first, seed in (("B=2, K=3 beams, V=7 tokens", 2, 3, 7, 2, False, 0),
                                           ("the first step: beams 1.. start at -inf", 2, 3, 6, 1, True, 1),
                                           ("one beam, K=1", 2, 1, 5, 3, False, 2),
                                           ("V = K = 4", 1, 4, 4, 2, False, 3)):
        g = _gen(seed + 40)
        ys = torch.randint(3, 9, (B, K, t), generator=g)
        scores = -torch.rand(B, K, generator=g).mul(3).sort(-1, descending=True).values
        if first:
            ys = ys[:, :1].expand(B, K, t).clone()
            scores[:, 0], scores[:, 1:] = 0.0, float("-inf")
        logp = torch.log_softmax(_randn(g, B, K, V, scale=2.0), -1)
        case = f"case '{label}'"
        want_ys, want_s = _sol_beam_step(ys, scores, logp)
        got_ys, got_s = _pair(case, _call(case, fn, ys.clone(), scores.clone(), logp.clone()), names="(ys, scores)")
        vv = lambda i, **kw: (lambda: _beam_variant(ys, scores, logp, **kw)[i])  # noqa: E731
        mistakes = [
            ("the beam and the token are swapped: for a flat index idx in [0, K*V) the beam is idx // V and the "
             "token idx % V.", vv(0, swap=True)),
            ("each beam's running score must be added to its log-probabilities before the top-k.", vv(0, add=False)),
            ("the prefixes were not reordered: the new hypothesis j continues beam idx // V, so take ys[b, beam] "
             "before appending its token.", vv(0, reorder=False)),
            ("the top-k is over all K*V candidates of a batch element together (reshape (B, K*V)), not the best "
             "token of each beam.", vv(0, per_beam=True)),
            ("the top-k ran over the whole batch: each batch element keeps its own K hypotheses, a top-k per row "
             "of (B, K*V).", vv(0, whole_batch=True)),
        ]
        ms = [("the scores are probabilities: keep adding log-probabilities (products of probabilities underflow).",
               lambda: want_s.exp()),
              ("the new scores must be totals: each beam's running score plus the token's log-probability.",
               lambda: logp.reshape(B, K * V).topk(K, -1).values),
              ("the top-k is over all K*V candidates of a batch element together, not the best token of each beam.",
               vv(1, per_beam=True))]
        if isinstance(got_ys, torch.Tensor) and got_ys.dtype.is_floating_point:
            _fail(f"{case}: the prefixes have dtype {got_ys.dtype}: token ids are long.")
        _compare(case, got_ys, want_ys, "the new prefixes", shape_names="(B, K, t + 1)", mistakes=mistakes)
        _compare(case, got_s, want_s, "the new scores", shape_names="(B, K)", mistakes=ms)
        cases.append(label)
    return cases


def _error_beam_step(exc):
    if isinstance(exc, IndexError) or "index" in str(exc).lower():
        return ("An index out of range often means the beam and the token are swapped: for a flat index idx in "
                "[0, K*V) the beam is idx // V and the token idx % V.")
    return None


# ---- chapter 14: one BPE merge ------------------------------------------------------------------

def _sol_bpe_merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)   # the pair: one new token, and skip both
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _bpe_variant(ids, pair, new_id, kind):
    ids = list(ids)
    if kind == "overlap":
        return [new_id if (a, b) == pair else a for a, b in zip(ids, ids[1:])] + (
            [ids[-1]] if ids and (len(ids) < 2 or (ids[-2], ids[-1]) != pair) else [])
    if kind == "right":
        return _sol_bpe_merge(ids[::-1], pair[::-1], new_id)[::-1]
    if kind == "first":
        for i in range(len(ids) - 1):
            if (ids[i], ids[i + 1]) == pair:
                return ids[:i] + [new_id] + ids[i + 2:]
        return ids
    if kind == "drop_last":
        out, i = [], 0
        while i < len(ids) - 1:
            if (ids[i], ids[i + 1]) == pair:
                out.append(new_id)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        return out
    if kind == "unordered":
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and {ids[i], ids[i + 1]} == set(pair) and len({ids[i], ids[i + 1]}) == len(set(pair)):
                out.append(new_id)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        return out
    raise ValueError(kind)


@_exercise(
    "bpe_merge", 14,
    "bpe_merge(ids, pair, new_id) -> list",
    "Apply one BPE merge: replace every occurrence of the adjacent pair (a, b) in the list of ids by new_id, "
    "scanning left to right; occurrences do not overlap, so merging (a, a) in [a, a, a] gives [new_id, a]. "
    "Returns a new list; ids is left unchanged.",
    "Walk with an index i: if ids[i], ids[i + 1] is the pair, append new_id and jump by 2 (both tokens are "
    "used); otherwise append ids[i] and step by 1. Mind the last token (i + 1 < len(ids)). Build a new list.",
    _sol_bpe_merge,
)
def _check_bpe_merge(fn):
    from .tokenizer import merge_pair
    cases = []
    for label, ids, pair, new in (("two occurrences", [1, 2, 3, 1, 2], (1, 2), 9),
                                  ("a run of three: a a a", [5, 5, 5], (5, 5), 9),
                                  ("a run of four", [4, 5, 5, 5, 5], (5, 5), 9),
                                  ("the pair at the end", [3, 1, 1, 2], (1, 2), 9),
                                  ("the reversed pair is not the pair", [2, 1, 7, 1, 2], (1, 2), 9),
                                  ("no occurrence", [1, 3, 2], (1, 2), 9),
                                  ("one token", [7], (7, 7), 9),
                                  ("empty", [], (1, 2), 9)):
        case = f"case '{label}': bpe_merge({ids}, {pair}, {new})"
        want = merge_pair(ids, pair, new)
        given = list(ids)
        got = _call(case, fn, given, pair, new)
        if given != ids:
            _fail(f"{case}: your function changed its input list to {given}: build a new list and leave ids unchanged.")
        if got is None:
            _fail(f"{case}: the result is None. Did you forget `return`?")
        if isinstance(got, torch.Tensor):
            got = got.tolist()
        if not isinstance(got, (list, tuple)):
            _fail(f"{case}: expected a list of ids, got {type(got).__name__}.")
        got = list(got)
        if got == want:
            cases.append(label)
            continue
        messages = {
            "overlap": "occurrences overlap: after a merge, skip both tokens (i += 2), so (a, a) in a a a gives [new, a].",
            "right": "the scan went right to left: BPE replaces occurrences from the left, so (a, a) in a a a gives [new, a].",
            "first": "only the first occurrence was replaced: replace every occurrence.",
            "drop_last": "the last token was lost: when no pair starts at the last position, still append ids[-1].",
            "unordered": "the pair is ordered: (a, b) matches a followed by b, not b followed by a.",
        }
        for kind, message in messages.items():
            if got == _bpe_variant(ids, pair, new, kind):
                _fail(f"{case}: expected {want}, got {got}: {message}")
        _fail(f"{case}: expected {want}, got {got}.")
    return cases


# ---- chapter 15: rotary positions ---------------------------------------------------------------

def _sol_apply_rope(x, positions, theta=10000.0):
    Dh = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)    # (Dh/2,) theta_i = theta^(-2i/Dh)
    angle = positions.to(torch.float64)[:, None] * inv_freq                    # (T, Dh/2), in float64
    angle = torch.cat([angle, angle], dim=-1)                                  # pair i in columns i and i + Dh/2
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)                                     # rotate_half: a quarter turn
    return x * angle.cos().to(x.dtype) + rotated * angle.sin().to(x.dtype)


def _rope_variant(x, positions, theta, *, layout="half", sign=1, exponent=2, offset=0, table="cat", swap=False,
                  dtype=torch.float64):
    Dh = x.shape[-1]
    i = torch.arange(Dh // 2, dtype=dtype)
    inv = torch.tensor(theta, dtype=dtype) ** (-exponent * i / Dh)
    angle = (positions.to(dtype)[:, None] + offset) * inv
    if layout == "interleaved":
        ang = angle.repeat_interleave(2, -1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rot = torch.stack([-x2, x1], -1).flatten(-2)
    else:
        ang = torch.cat([angle, angle], -1) if table == "cat" else angle.repeat_interleave(2, -1)
        x1, x2 = x.chunk(2, -1)
        rot = torch.cat([-x2, x1], -1)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    if swap:
        cos, sin = sin, cos
    return x * cos + sign * rot * sin


@_exercise(
    "apply_rope", 15,
    "apply_rope(x, positions, theta=10000.0) -> rotated",
    "Rotary positions in tfmini's half-split layout: dimension i is paired with i + Dh/2 and the pair turns by "
    "the angle p * theta_i, theta_i = theta^(-2i/Dh), i = 0 .. Dh/2 - 1. x (..., T, Dh) queries or keys; "
    "positions (T,) long, the position of each row. Returns x rotated, same shape and dtype.",
    "angle = positions[:, None] * theta ** (-torch.arange(0, Dh, 2) / Dh), computed in float64 (float16 loses "
    "the angles of far positions); duplicate it, torch.cat([angle, angle], -1), so that columns i and i + Dh/2 "
    "share it. rotate_half(x) = cat([-x2, x1]) over the two halves. Result: x * cos + rotate_half(x) * sin, "
    "with cos and sin cast to x.dtype.",
    _sol_apply_rope,
)
def _check_apply_rope(fn):
    cases = []
    g = _gen(50)
    for label, x, positions, theta in (
            ("B=2, H=2, T=5, Dh=8, positions 0..4", _randn(g, 2, 2, 5, 8), torch.arange(5), 10000.0),
            ("one position, T=1, at position 6", _randn(g, 1, 1, 16), torch.tensor([6]), 10000.0),
            ("positions of a cache [7, 100, 3]", _randn(g, 3, 8), torch.tensor([7, 100, 3]), 10000.0),
            ("theta=500", _randn(g, 2, 4, 6), torch.arange(2, 6), 500.0),
            ("float16, far positions [1000, 2000, 3000]", _randn(g, 2, 3, 16, dtype=torch.float16),
             torch.tensor([1000, 2000, 3000]), 10000.0)):
        case = f"case '{label}' (x {tuple(x.shape)}, {x.dtype})"
        cos, sin = tfmini.rope_cos_sin(positions, x.shape[-1], theta)
        want = tfmini.apply_rope(x, cos, sin)
        got = _call(case, fn, x.clone(), positions.clone(), theta)
        rv = lambda **kw: (lambda: _rope_variant(x, positions, theta, **kw))  # noqa: E731
        mistakes = [
            ("the pairs are (2i, 2i+1) (interleaved layout): tfmini pairs dimension i with i + Dh/2 (half-split), "
             "rotate_half = cat([-x2, x1]) over the two halves.", rv(layout="interleaved")),
            ("the rotation goes the wrong way: rotate_half(x) = cat([-x2, x1]), with the minus on the second half.",
             rv(sign=-1)),
            ("the frequencies are wrong: theta^(-2i/Dh) with i = 0 .. Dh/2 - 1 (you used i/Dh?).", rv(exponent=1)),
            ("the positions are shifted by one: row t is at positions[t], counted from 0.", rv(offset=1)),
            ("each angle belongs to columns i and i + Dh/2: duplicate it with cat([angle, angle]), not repeat_interleave.",
             rv(table="repeat")),
            ("cos and sin are swapped: x * cos + rotate_half(x) * sin.", rv(swap=True)),
            ("theta is ignored: the base of the frequencies is the argument theta.",
             lambda: _rope_variant(x, positions, 10000.0)),
        ]
        if x.dtype == torch.float16:
            mistakes.append(("in float16 the angles p * theta_i of far positions lose precision: compute the angles "
                             "in float64 (or float32) and cast only cos and sin to x.dtype.",
                             rv(dtype=torch.float16)))
            mistakes.append(("in float16 the angles p * theta_i of far positions lose precision: compute the angles "
                             "in float64 (or float32) and cast only cos and sin to x.dtype.",
                             lambda: _rope_variant(x.float(), positions, theta, dtype=torch.float16)))
        tol = 5e-3 if x.dtype == torch.float16 else 1e-4
        got_t = _as_tensor(case, got, "the output")
        if tuple(got_t.shape) == tuple(want.shape) and got_t.dtype != x.dtype:
            _fail(f"{case}: the output has dtype {got_t.dtype}, expected {x.dtype} (the dtype of x): "
                  f"cast cos and sin to x.dtype.")
        try:
            _compare(case, got, want, "the output", shape_names="(..., T, Dh)", mistakes=mistakes, atol=tol, rtol=tol)
        except _Fail:
            if x.dtype == torch.float16:
                x32 = x.float()
                got32 = _call(case, fn, x32, positions.clone(), theta)
                if isinstance(got32, torch.Tensor) and _same(got32, tfmini.apply_rope(x32, cos, sin), 1e-4, 1e-4):
                    _fail(f"{case}: right in float32, wrong in float16: the angles p * theta_i of far positions lose "
                          f"precision in float16. Compute the angles in float64 (or float32) and cast only cos and "
                          f"sin to x.dtype.")
            raise
        cases.append(label)
    return cases


# ---- chapter 16: RMSNorm, SwiGLU, grouped-query attention ---------------------------------------

def _sol_rms_norm(x, gamma, eps=1e-6):
    h = x.float()                                                     # float32: squares of float16 overflow
    h = h / torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)     # no mean subtracted, no bias
    return gamma * h.to(x.dtype)


@_exercise(
    "rms_norm", 16,
    "rms_norm(x, gamma, eps=1e-6) -> y",
    "RMSNorm over the last axis: y = x / sqrt(mean(x^2) + eps) * gamma, without centring and without bias. "
    "x (..., D); gamma (D,). Computed in float32 and cast back, so float16 inputs do not overflow. Returns y "
    "of the shape and dtype of x.",
    "mean of the squares over dim=-1 with keepdim=True; eps inside the square root; multiply by gamma. Unlike "
    "LayerNorm, nothing is subtracted. For float16 inputs, square in float32 (x.float()) - 300^2 is already "
    "above float16's largest number 65504 - and cast the result back with .to(x.dtype).",
    _sol_rms_norm,
)
def _check_rms_norm(fn):
    cases = []
    g = _gen(60)
    for label, x, eps in (("B=2, T=3, D=8", _randn(g, 2, 3, 8) + 0.5, 1e-6),
                          ("small inputs (eps matters)", _randn(g, 2, 6, scale=1e-3), 1e-6),
                          ("width one, D=1", _randn(g, 4, 1), 1e-6),
                          ("float16 with large values (squares overflow)", _randn(g, 2, 8, scale=300.0, dtype=torch.float16), 1e-6)):
        D = x.shape[-1]
        gamma = (1 + _randn(g, D, scale=0.3)).to(x.dtype)
        case = f"case '{label}' (x {tuple(x.shape)}, {x.dtype})"
        norm = tfmini.RMSNorm(D, eps).to(x.dtype)
        with torch.no_grad():
            norm.weight.copy_(gamma)
            want = norm(x)
        xf = x.double()
        ms = xf.pow(2).mean(-1, keepdim=True)
        gf = gamma.double()
        mistakes = [
            ("RMSNorm does not subtract the mean (that is LayerNorm): y = x / sqrt(mean(x^2) + eps) * gamma.",
             lambda: (xf - xf.mean(-1, keepdim=True)) / torch.sqrt((xf - xf.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True) + eps) * gf),
            ("eps goes inside the square root: sqrt(mean(x^2) + eps).", lambda: xf / (ms.sqrt() + eps) * gf),
            ("divide by the root of the *mean* of the squares, not of their sum.",
             lambda: xf / torch.sqrt(xf.pow(2).sum(-1, keepdim=True) + eps) * gf),
            ("gamma is missing.", lambda: xf / torch.sqrt(ms + eps)),
            ("normalised over the wrong axis: over each position's D features (dim=-1).",
             lambda: xf / torch.sqrt(xf.pow(2).mean(0, keepdim=True) + eps) * gf),
        ]
        got = _as_tensor(case, _call(case, fn, x.clone(), gamma.clone(), eps), "the output")
        if x.dtype == torch.float16 and tuple(got.shape) == tuple(x.shape):
            gd = got.detach().double()
            if (~torch.isfinite(gd)).any() or (gd.abs() < 1e-3).all():
                _fail(f"{case}: the output is {'inf/NaN' if (~torch.isfinite(gd)).any() else 'all zeros'}: in float16 the "
                      f"squares overflow (x^2 > 65504). Compute in float32 (x.float()) and cast back with .to(x.dtype).")
            if got.dtype != x.dtype:
                _fail(f"{case}: the output has dtype {got.dtype}, expected {x.dtype}: cast back with .to(x.dtype).")
        tol = 2e-3 if x.dtype == torch.float16 else 1e-5
        _compare(case, got, want, "the output", mistakes=mistakes, atol=tol, rtol=tol)
        cases.append(label)
    return cases


def _sol_swiglu(x, W_gate, W_1, W_2):
    return (F.silu(x @ W_gate) * (x @ W_1)) @ W_2     # the gate branch through SiLU, times the linear branch


@_exercise(
    "swiglu", 16,
    "swiglu(x, W_gate, W_1, W_2) -> y",
    "The SwiGLU feed-forward network of Llama: (silu(x W_gate) * (x W_1)) W_2, without biases. x (..., d); "
    "W_gate, W_1 (d, d_ff); W_2 (d_ff, d). Returns y (..., d).",
    "Two branches of width d_ff: the gate x @ W_gate goes through F.silu (silu(z) = z * sigmoid(z)), the other "
    "x @ W_1 stays linear. Multiply them elementwise, then project back with W_2.",
    _sol_swiglu,
)
def _check_swiglu(fn):
    cases = []
    g = _gen(70)
    for label, shape, d_ff in (("B=2, T=3, d=8, d_ff=12", (2, 3, 8), 12), ("one position, d=8, d_ff=16", (1, 1, 8), 16),
                               ("a matrix (T=5, d=6), d_ff=4", (5, 6), 4)):
        d = shape[-1]
        x = _randn(g, *shape)
        Wg, W1, W2 = _randn(g, d, d_ff, scale=0.5), _randn(g, d, d_ff, scale=0.5), _randn(g, d_ff, d, scale=0.5)
        ffn = tfmini.SwiGLU(d, d_ff, bias=False)
        with torch.no_grad():
            ffn.linear_gate.weight.copy_(Wg.T)
            ffn.linear1.weight.copy_(W1.T)
            ffn.linear2.weight.copy_(W2.T)
            want = ffn(x)
        a, b = x @ Wg, x @ W1
        mistakes = [
            ("the SiLU is on the wrong branch: it goes on the gate x @ W_gate, not on x @ W_1.", lambda: (a * F.silu(b)) @ W2),
            ("the gate uses sigmoid: SwiGLU uses silu(z) = z * sigmoid(z).", lambda: (torch.sigmoid(a) * b) @ W2),
            ("the gate uses ReLU: SwiGLU uses silu.", lambda: (F.relu(a) * b) @ W2),
            ("the gate uses GELU: SwiGLU uses silu.", lambda: (F.gelu(a) * b) @ W2),
            ("the linear branch x @ W_1 is missing: multiply the gate by it.", lambda: F.silu(a) @ W2),
            ("both branches went through silu: only the gate does.", lambda: (F.silu(a) * F.silu(b)) @ W2),
            ("the branches are added: SwiGLU multiplies them elementwise.", lambda: (F.silu(a) + b) @ W2),
        ]
        case = f"case '{label}'"
        got = _call(case, fn, x.clone(), Wg.clone(), W1.clone(), W2.clone())
        _compare(case, got, want, "the output", shape_names="(..., d)", mistakes=mistakes, atol=1e-4, rtol=1e-4)
        cases.append(label)
    return cases


def _sol_gqa(x, W_q, W_k, W_v, W_o, H, G):
    B, T, _ = x.shape
    q = (x @ W_q).reshape(B, T, H, -1).transpose(1, 2)                 # (B, H, T, Dh)
    k = (x @ W_k).reshape(B, T, G, -1).transpose(1, 2)                 # (B, G, T, Dh)
    v = (x @ W_v).reshape(B, T, G, -1).transpose(1, 2)                 # (B, G, T, Dh)
    k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)   # head h reads group h // (H/G)
    out, _ = tfmini.scaled_dot_product_attention(q, k, v, tfmini.causal_mask(T))
    return out.transpose(1, 2).reshape(B, T, -1) @ W_o                 # (B, T, H * Dh) -> (B, T, D)


def _gqa_variant(x, W_q, W_k, W_v, W_o, H, G, *, repeat="interleave", causal="tril", scale=True, merge="hd"):
    B, T, _ = x.shape
    q = (x @ W_q).reshape(B, T, H, -1).transpose(1, 2)
    k = (x @ W_k).reshape(B, T, G, -1).transpose(1, 2)
    v = (x @ W_v).reshape(B, T, G, -1).transpose(1, 2)
    if repeat == "interleave":
        k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
    else:
        k, v = k.repeat(1, H // G, 1, 1), v.repeat(1, H // G, 1, 1)
    if not scale:
        q = q * math.sqrt(q.shape[-1])
    m = {"tril": tfmini.causal_mask(T), "none": None, "triu": tfmini.causal_mask(T).T}[causal]
    out, _ = tfmini.scaled_dot_product_attention(q, k, v, m)
    out = out.permute(0, 2, 3, 1) if merge == "dh" else out.transpose(1, 2)
    return out.reshape(B, T, -1) @ W_o


@_exercise(
    "gqa", 16,
    "gqa(x, W_q, W_k, W_v, W_o, H, G) -> y",
    "Causal grouped-query self-attention: H query heads and G key/value heads (G divides H), head width Dh; "
    "query head h reads key/value head h // (H / G). x (B, T, D); W_q (D, H * Dh); W_k, W_v (D, G * Dh); "
    "W_o (H * Dh, D); no biases. Returns y (B, T, D).",
    "Project and split: q (B, H, T, Dh), k and v (B, G, T, Dh). Give every query head its key/value head with "
    "k.repeat_interleave(H // G, dim=1) - consecutive query heads share a group; .repeat would tile them "
    "instead. Then causal scaled dot-product attention (tfmini.causal_mask(T)), merge the heads "
    "(transpose(1, 2), reshape) and multiply by W_o.",
    _sol_gqa,
)
def _check_gqa(fn):
    cases = []
    for label, B, T, D, H, G, Dh, seed in (("B=2, T=5, D=16, H=4 query heads, G=2 groups", 2, 5, 16, 4, 2, 4, 0),
                                           ("multi-query attention, G=1", 1, 4, 8, 4, 1, 2, 1),
                                           ("G = H = 2 (plain multi-head)", 2, 3, 8, 2, 2, 4, 2),
                                           ("one position, T=1", 2, 1, 12, 6, 3, 2, 3),
                                           ("H=6 heads in G=3 groups, head_dim 3", 1, 4, 8, 6, 3, 3, 4)):
        g = _gen(seed + 80)
        x = _randn(g, B, T, D)
        Ws = (_randn(g, D, H * Dh, scale=D ** -0.5), _randn(g, D, G * Dh, scale=D ** -0.5),
              _randn(g, D, G * Dh, scale=D ** -0.5), _randn(g, H * Dh, D, scale=(H * Dh) ** -0.5))
        want = _gqa_variant(x, *Ws, H, G)
        vv = lambda **kw: (lambda: _gqa_variant(x, *Ws, H, G, **kw))  # noqa: E731
        mistakes = [
            ("the query heads read the wrong key/value heads: head h reads group h // (H/G) (repeat_interleave), "
             "not h % G (repeat tiles the groups).", vv(repeat="tile")),
            ("position t sees later positions: the causal mask is missing.", vv(causal="none")),
            ("the causal mask is transposed: query t may see keys 0..t (tril), not t..T-1.", vv(causal="triu")),
            ("the scores are not scaled: divide by sqrt(Dh), the head width.", vv(scale=False)),
            ("the heads are merged in the wrong order: concatenate whole heads (transpose(1, 2), then reshape).",
             vv(merge="dh")),
        ]
        case = f"case '{label}'"
        got = _call(case, fn, x.clone(), *[W.clone() for W in Ws], H, G)
        _compare(case, got, want, "the output", shape_names="(B, T, D)", mistakes=mistakes, atol=1e-5, rtol=1e-4)
        cases.append(label)
    return cases


_with_error_hint("beam_step", _error_beam_step)


# --------------------------------------------------------------------------------------------------
# The public API
# --------------------------------------------------------------------------------------------------

def _get(name) -> _Exercise:
    if name not in _EXERCISES:
        raise ValueError(f"name: expected one of {names()}, got {name!r}")
    return _EXERCISES[name]


def names() -> List[str]:
    """The names of the exercises, in the order of the chapters.

    Returns:
        a list of str, each a valid ``name`` for :func:`check`, :func:`hint`, :func:`solution`,
        :func:`signature` and :func:`stub`.
    """
    return sorted(_EXERCISES, key=lambda n: (_EXERCISES[n].chapter, list(_EXERCISES).index(n)))


def signature(name: str) -> str:
    """The function an exercise expects: its signature, what it takes and what it returns.

    Args:
        name: an exercise, one of :func:`names`.

    Returns:
        the signature line followed by a description of the arguments and the result (shapes included).

    Raises:
        ValueError: an unknown ``name`` (the message lists the names).
    """
    e = _get(name)
    return f"{e.signature}\n\n{e.doc}"


WIDTH = 100  # a verdict's lines fit a book page's code column and a notebook's output area


def _say(text: str) -> None:
    """Print ``text`` with each line wrapped to :data:`WIDTH` characters (continuations indented)."""
    lines = []
    for line in text.split("\n"):
        lines += textwrap.wrap(line, WIDTH, subsequent_indent="  ", break_long_words=False,
                               break_on_hyphens=False) or [""]
    print("\n".join(lines))


def check(name: str, fn: Callable) -> bool:
    """Run ``fn`` on the exercise's cases and print a verdict.

    The cases are random inputs of fixed seeds and the edge cases that break implementations. The
    verdict names the first case that fails, the expected and the actual shape or values and, where
    the answer matches a known mistake, its likely cause. A function that still raises
    ``NotImplementedError`` is "not attempted yet"; any other exception is reported with its type,
    its message and the case that raised it. Nothing is raised to the caller.

    Args:
        name: an exercise, one of :func:`names`.
        fn: your function, with the signature of :func:`signature`.

    Returns:
        True if ``fn`` passes every case, else False.

    Raises:
        ValueError: an unknown ``name`` (the message lists the names), or ``fn`` not callable.
    """
    e = _get(name)
    if not callable(fn):
        raise ValueError(f"fn: expected your function (a callable) for exercise {name!r}, got {type(fn).__name__}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add waiting, on a busy machine a lot of it
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            passed = e.checker(fn)
    except NotImplementedError:
        _say(f"{name}: not attempted yet. Replace `raise NotImplementedError` with your code and run the check "
              f"again; hint({name!r}) gives a hint.")
        return False
    except _Fail as failure:
        _say(f"Not yet - {name}: {failure}\nhint({name!r}) gives a hint, solution({name!r}) shows a reference.")
        return False
    except _Raised as raised:
        extra = e.error_hint(raised.exc) if e.error_hint else None
        _say(f"Not yet - {name}: in {raised.case}, your function raised "
              f"{type(raised.exc).__name__}: {raised.exc}" + (f"\n{extra}" if extra else "")
              + f"\nhint({name!r}) gives a hint, solution({name!r}) shows a reference.")
        return False
    finally:
        torch.set_num_threads(threads)
    _say(f"Correct - {name} passes all {len(passed)} cases: {'; '.join(passed)}.")
    return True


def hint(name: str) -> None:
    """Print the function an exercise expects and a hint.

    Args:
        name: an exercise, one of :func:`names`.

    Raises:
        ValueError: an unknown ``name`` (the message lists the names).
    """
    e = _get(name)
    print(f"{e.signature}\n\n{e.doc}\n\nHint: {e.hint}")


def _solution_source(name: str) -> str:
    src = inspect.getsource(_get(name).reference).replace("def _sol_", "def ")
    imports = ["import math"] if "math." in src else []
    imports += ["import torch"] if "torch." in src else []
    imports += ["import torch.nn.functional as F"] if "F." in src else []
    imports += ["import tfmini"] if "tfmini." in src else []
    return ("\n".join(imports) + "\n\n\n" if imports else "") + src


def solution(name: str) -> None:
    """Print a reference solution of an exercise: the source of a clear implementation, with its imports.

    Args:
        name: an exercise, one of :func:`names`.

    Raises:
        ValueError: an unknown ``name`` (the message lists the names).
    """
    print(_solution_source(name))


def stub(name: str) -> str:
    """The code of a "Your turn" cell: the function to write, whose body raises ``NotImplementedError``, and its check.

    Args:
        name: an exercise, one of :func:`names`.

    Returns:
        the cell's code (an import of :func:`check`, the stub with a docstring, and ``check(name, fn)``).

    Raises:
        ValueError: an unknown ``name`` (the message lists the names).
    """
    e = _get(name)
    head = re.sub(r"\s*->.*$", "", e.signature)
    fn_name = head.split("(")[0]
    doc = e.doc
    lines, line = [], ""
    for word in doc.split():
        if len(line) + len(word) + 1 > 96:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    body = "\n    ".join(lines)
    return (f"from tfmini.exercises import check, hint, solution\n\n\n"
            f"def {head}:\n    \"\"\"{body}\"\"\"\n    raise NotImplementedError   # your code here\n\n\n"
            f"check({name!r}, {fn_name})")
