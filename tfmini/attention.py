"""Attention: scoring functions, Bahdanau's additive attention, scaled dot-product and multi-head attention.

Shapes: B batch, T queries (target length), S keys (source length), D d_model,
H heads, Dh = D / H head width, Dk key width, Dv value width.
Masks are bool, True = may attend (see :mod:`tfmini.masks`).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ._checks import check_3d, check_mask_broadcasts
from .masks import causal_mask

__all__ = [
    "masked_softmax", "DotScore", "BilinearScore", "AdditiveScore", "BahdanauAttention",
    "scaled_dot_product_attention", "MultiHeadAttention",
]


def masked_softmax(scores: torch.Tensor, mask: Optional[torch.Tensor] = None, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` that gives masked positions exactly zero weight.

    Masked scores are filled with the most negative finite number of the compute dtype (not
    ``-inf`` and not ``-1e9``, which overflows in fp16). Half-precision scores are softmaxed in
    float32. A row in which every position is masked gets all-zero weights instead of NaN.

    Args:
        scores: ``(..., S)`` real scores.
        mask: bool, broadcastable to ``scores``; True = may attend.
        dim: the dimension to normalise over (the keys).

    Returns:
        weights of the shape of ``scores`` in the compute dtype (float32 for fp16/bf16 scores).

    Shape:
        scores ``(..., S)``, mask broadcastable to it -> weights ``(..., S)``.
    """
    s = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    if mask is None:
        return torch.softmax(s, dim=dim)
    check_mask_broadcasts(mask, tuple(scores.shape), "mask")
    s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    # A fully masked row would softmax to a uniform distribution over forbidden keys: zero it.
    return torch.softmax(s, dim=dim).masked_fill(~mask, 0.0)


def _check_width(x: torch.Tensor, name: str, width: int) -> None:
    if x.shape[-1] != width:
        raise ValueError(f"{name}: expected last dimension {width}, got shape {tuple(x.shape)}")


class DotScore(nn.Module):
    r"""Dot-product score :math:`a(\mathbf q, \mathbf k) = \mathbf q \mathbf k^\top` (optionally divided by :math:`\sqrt{d}`).

    No parameters; query and key must have the same width.

    Args:
        scaled: divide the scores by :math:`\sqrt{d}`, the width of query and key (the score of
            :func:`scaled_dot_product_attention`).

    Shape:
        query ``(B, T, D)``, keys ``(B, S, D)`` -> scores ``(B, T, S)``.
    """

    def __init__(self, scaled: bool = False):
        super().__init__()
        self.scaled = scaled

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        if query.shape[-1] != keys.shape[-1]:
            raise ValueError(
                f"keys: expected width {query.shape[-1]} (the query width), got shape {tuple(keys.shape)}"
            )
        scores = query @ keys.transpose(-2, -1)  # (B, T, S)
        return scores / math.sqrt(query.shape[-1]) if self.scaled else scores


class BilinearScore(nn.Module):
    r"""Bilinear ("general") score :math:`a(\mathbf q, \mathbf k) = \mathbf q W \mathbf k^\top` (Luong et al., 2015), row vectors.

    ``d_query * d_key`` parameters; query and key widths may differ.

    Args:
        d_query: width ``Dq`` of the queries.
        d_key: width ``Dk`` of the keys.

    Shape:
        query ``(B, T, Dq)``, keys ``(B, S, Dk)`` -> scores ``(B, T, S)``.
    """

    def __init__(self, d_query: int, d_key: int):
        super().__init__()
        self.W = nn.Linear(d_key, d_query, bias=False)

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        _check_width(query, "query", self.W.out_features)
        _check_width(keys, "keys", self.W.in_features)
        return query @ self.W(keys).transpose(-2, -1)  # (B, T, S)


class AdditiveScore(nn.Module):
    r"""Additive (MLP) score :math:`a(\mathbf q, \mathbf k) = \tanh(\mathbf q W_q + \mathbf k W_k + \mathbf b)\,\mathbf w^\top` (Bahdanau et al., 2015).

    Row vectors, as in the book; the module's ``v`` holds :math:`\mathbf w`.

    ``(d_query + d_key + 2) * d_hidden`` parameters.

    Args:
        d_query: width ``Dq`` of the queries.
        d_key: width ``Dk`` of the keys.
        d_hidden: width of the hidden layer of the score MLP.

    ``forward(query, keys, projected_keys=None)``: ``projected_keys`` is ``W_k(keys)`` when it is
    already computed (an RNN decoder reuses it at every step).

    Shape:
        query ``(B, T, Dq)``, keys ``(B, S, Dk)`` (or projected_keys ``(B, S, d_hidden)``)
        -> scores ``(B, T, S)``.
    """

    def __init__(self, d_query: int, d_key: int, d_hidden: int):
        super().__init__()
        self.W_q = nn.Linear(d_query, d_hidden, bias=False)
        self.W_k = nn.Linear(d_key, d_hidden, bias=True)
        self.v = nn.Linear(d_hidden, 1, bias=False)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, projected_keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``projected_keys`` = ``W_k(keys)``, if already computed (an RNN decoder reuses it at every step)."""
        check_3d(query, "query", self.W_q.in_features)
        if projected_keys is None:
            check_3d(keys, "keys", self.W_k.in_features)
            projected_keys = self.W_k(keys)  # (B, S, Dh)
        hidden = torch.tanh(self.W_q(query)[:, :, None, :] + projected_keys[:, None, :, :])  # (B, T, S, Dh)
        return self.v(hidden).squeeze(-1)  # (B, T, S)


class BahdanauAttention(nn.Module):
    r"""One step of Bahdanau attention, eqs. (6)-(8) of the lecture notes, in the book's notation.

    .. math::
        e_{ij} = a(\mathbf h^d_{i-1}, \mathbf f_j), \quad
        \alpha_i = \mathrm{softmax}(\mathbf e_i), \quad
        \mathbf c_i = \sum_j \alpha_{ij} \mathbf f_j

    with the additive score :class:`AdditiveScore`.

    Args:
        d_query: width of the decoder state used as query.
        d_key: width of the encoder features ``f_j`` (keys and values).
        d_hidden: width of the score MLP.

    ``forward(query, features, mask=None, projected_keys=None)`` returns ``(context, weights)``;
    ``projected_keys`` is ``self.score.W_k(features)`` when a decoder has computed it once per source.

    Shape:
        query ``(B, Dq)``, features ``(B, S, Dk)``, mask bool ``(B, S)`` (True = real token)
        -> context ``(B, Dk)``, weights ``(B, S)``.
    """

    def __init__(self, d_query: int, d_key: int, d_hidden: int):
        super().__init__()
        self.score = AdditiveScore(d_query, d_key, d_hidden)

    def forward(self, query: torch.Tensor, features: torch.Tensor, mask: Optional[torch.Tensor] = None,
                projected_keys: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """``projected_keys``: ``self.score.W_k(features)``, computed once per source sequence by a decoder."""
        if query.dim() != 2 or query.shape[-1] != self.score.W_q.in_features:
            raise ValueError(f"query: expected shape (B, {self.score.W_q.in_features}), got {tuple(query.shape)}")
        check_3d(features, "features", self.score.W_k.in_features)
        if mask is not None:
            check_mask_broadcasts(mask, tuple(features.shape[:2]), "mask")
        scores = self.score(query[:, None, :], features, projected_keys)[:, 0]  # (B, S)
        weights = masked_softmax(scores, mask).to(features.dtype)  # (B, S)
        context = (weights[:, :, None] * features).sum(dim=1)  # (B, Dk)
        return context, weights


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or not x.dtype.is_floating_point:
            got = f"shape {tuple(x.shape)}, dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name}: expected a floating tensor of shape (..., L, width), got {got}")
        if x.shape[-2] == 0 or any(n == 0 for n in x.shape[:-2]):
            raise ValueError(f"{name}: expected a non-empty batch and sequence, got shape {tuple(x.shape)}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k: expected width Dk={q.shape[-1]} to match q, got shape {tuple(k.shape)} (q {tuple(q.shape)})")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v: expected S={k.shape[-2]} positions to match k, got shape {tuple(v.shape)} (k {tuple(k.shape)})")
    if q.shape[:-2] != k.shape[:-2] or v.shape[:-2] != k.shape[:-2]:
        raise ValueError(
            f"k, v: expected leading (batch) dimensions {tuple(q.shape[:-2])} as in q, "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v: expected one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None,
                                 dropout_p: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Scaled dot-product attention, eq. (9) of the lecture notes, written out explicitly.

    .. math:: \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V

    This is the reference ("math") path: it returns the attention weights. Scores of fp16/bf16
    inputs are computed and softmaxed in float32. A query that may attend to nothing gets zero
    weights and a zero output.

    Args:
        q: ``(..., T, Dk)`` queries.
        k: ``(..., S, Dk)`` keys.
        v: ``(..., S, Dv)`` values.
        attn_mask: bool, broadcastable to ``(..., T, S)``; True = may attend.
        dropout_p: dropout on the weights used for the output (the returned weights are before dropout).

    Returns:
        ``(out, weights)``: ``(..., T, Dv)`` and ``(..., T, S)``.

    Shape:
        q ``(..., T, Dk)``, k ``(..., S, Dk)``, v ``(..., S, Dv)`` -> out ``(..., T, Dv)``,
        weights ``(..., T, S)``.
    """
    _check_qkv(q, k, v)
    if attn_mask is not None:
        check_mask_broadcasts(attn_mask, (*q.shape[:-1], k.shape[-2]))
    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scores = (q.to(compute) @ k.to(compute).transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (..., T, S)
    weights = masked_softmax(scores, attn_mask)
    used = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    out = used.to(v.dtype) @ v  # (..., T, Dv)
    return out, weights.to(v.dtype)


def _fused_attention(q, k, v, attn_mask, dropout_p, is_causal):
    """``F.scaled_dot_product_attention`` with tfmini's guarantee for fully masked rows (zeros, not NaN).

    Branch-free, so that it never waits for the GPU: a row that may attend to nothing is opened to
    every key (which keeps the kernel away from NaN) and its output is then zeroed. Rows that may
    attend somewhere see exactly their own mask, so their output is the kernel's, bit for bit.
    """
    if attn_mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    row_off = ~attn_mask.any(dim=-1, keepdim=True)  # (..., T, 1) True = a row with no key to attend to
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask | row_off, dropout_p=dropout_p)
    return out.masked_fill(row_off, 0.0)  # (..., T, Dv)


def _consecutive(tensors) -> Optional[torch.Tensor]:
    """The tensors stacked along dim 0 as a view of their storage, if they lie one after another in it
    (contiguous, same dtype and trailing shape); None otherwise. Nothing is copied."""
    first = tensors[0]
    ptr, offset = first.untyped_storage().data_ptr(), first.storage_offset()
    for t in tensors:
        if (not t.is_contiguous() or t.dtype != first.dtype or t.shape[1:] != first.shape[1:]
                or t.untyped_storage().data_ptr() != ptr or t.storage_offset() != offset):
            return None
        offset += t.numel()
    rows = sum(t.shape[0] for t in tensors)
    return first.detach().as_strided((rows, *first.shape[1:]), first.stride(), first.storage_offset())


# F.scaled_dot_product_attention reads grouped key/value heads itself (enable_gqa) from torch 2.5 on
_SDPA_GQA = tuple(int(n) for n in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def _grouped_attention(q, k, v, attn_mask, dropout_p, is_causal):
    """Fused attention of ``H`` query heads over ``G < H`` key/value heads, without repeating the keys and values.

    With torch >= 2.5 the kernel reads the groups itself (``enable_gqa=True``). Before, the ``H / G``
    query heads of a group become extra query rows of one attention over the group's keys:
    ``q (B, H, T, Dh)`` -> ``(B, G, H/G * T, Dh)``, the mask repeated for each of them. Fully masked
    rows give zeros, as with one key/value head per query head.

    Shape:
        q ``(B, H, T, Dh)``, k and v ``(B, G, S, Dh)``, attn_mask broadcastable to ``(B, H, T, S)``
        -> ``(B, H, T, Dh)``.
    """
    if _SDPA_GQA:
        if attn_mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal, enable_gqa=True)
        row_off = ~attn_mask.any(dim=-1, keepdim=True)  # (..., T, 1) True = a row with no key to attend to
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask | row_off, dropout_p=dropout_p,
                                             enable_gqa=True)
        return out.masked_fill(row_off, 0.0)  # (B, H, T, Dh)
    B, H, T, Dh = q.shape
    G, S = k.shape[1], k.shape[2]
    if is_causal:
        causal = causal_mask(T, S, device=q.device)  # (T, S)
        attn_mask = causal if attn_mask is None else attn_mask & causal
    if attn_mask is not None:
        attn_mask = attn_mask.expand(B, H, T, S).reshape(B, G, H // G * T, S)  # (B, G, H/G * T, S)
    out = _fused_attention(q.reshape(B, G, H // G * T, Dh), k, v, attn_mask, dropout_p, False)  # (B, G, H/G * T, Dh)
    return out.reshape(B, H, T, Dh)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention (Vaswani et al., 2017), batch-first, with optional grouped-query attention.

    .. math::
        \mathrm{head}_h = \mathrm{Attention}(Q W^Q_h, K W^K_h, V W^V_h), \quad
        \mathrm{MHA}(Q, K, V) = [\mathrm{head}_1; \dots; \mathrm{head}_H] W^O

    All heads are computed at once: project to ``H * Dh``, split into ``H`` heads of width ``Dh``
    and treat heads as a batch axis. With ``need_weights=False`` the fused
    ``F.scaled_dot_product_attention`` kernel is used; with ``need_weights=True`` the explicit
    :func:`scaled_dot_product_attention` (both give the same output). For self-attention
    (``query is key is value``) the three input projections run as one matrix product: their weights
    share one storage, and without gradients the stacked matrix is a view of it (see :meth:`project_qkv`).

    Grouped-query attention (Ainslie et al., 2023): with ``num_kv_heads=G`` < ``H`` there are only
    ``G`` key and value heads, each shared by ``H / G`` consecutive query heads (query head ``h``
    reads key/value head ``h // (H / G)``); ``G = 1`` is multi-query attention (Shazeer, 2019). A
    KV cache then holds ``G`` heads, not ``H``, and the fused path reads those ``G`` heads where they
    are, with no copy per query head. The explicit path (``need_weights=True``) and a call through which
    gradients flow repeat each key/value head for its ``H / G`` query heads first.

    Args:
        d_model: model width ``D``.
        num_heads: number of query heads ``H``; must divide ``d_model`` unless ``head_dim`` is given.
        dropout: dropout on the attention weights (training only).
        bias: whether the four projections have biases.
        num_kv_heads: number of key/value heads ``G`` (default ``H``); must divide ``H``.
        head_dim: width ``Dh`` of a head (default ``D / H``).

    ``forward(query, key, value, attn_mask=None, need_weights=False, is_causal=False)``: ``attn_mask``
    is bool, broadcastable to ``(B, H, T, S)``, True = may attend; ``need_weights`` also returns the
    per-head weights (explicit path); ``is_causal`` additionally forbids query ``t`` to see keys after
    it (the last ``T`` of the ``S`` keys are the queries' own positions) and lets the fused kernel skip
    building the mask.

    Shape:
        query ``(B, T, D)``, key and value ``(B, S, D)`` -> out ``(B, T, D)``, weights ``(B, H, T, S)`` or None.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 num_kv_heads: Optional[int] = None, head_dim: Optional[int] = None):
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"num_heads: expected >= 1, got {num_heads}")
        if head_dim is None and d_model % num_heads != 0:
            raise ValueError(
                f"d_model: expected a multiple of num_heads={num_heads}, got d_model={d_model} "
                f"(d_model % num_heads = {d_model % num_heads})"
            )
        if head_dim is not None and head_dim < 1:
            raise ValueError(f"head_dim: expected >= 1, got {head_dim}")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads < 1 or num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads: expected a divisor of num_heads={num_heads}, got {num_kv_heads}")
        self.d_model, self.num_heads, self.dropout = d_model, num_heads, dropout
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim or d_model // num_heads
        inner, kv_inner = num_heads * self.head_dim, num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=bias)
        self.k_proj = nn.Linear(d_model, kv_inner, bias=bias)
        self.v_proj = nn.Linear(d_model, kv_inner, bias=bias)
        self.out_proj = nn.Linear(inner, d_model, bias=bias)
        self._share_qkv_storage()

    def _split(self, x: torch.Tensor, heads: Optional[int] = None) -> torch.Tensor:
        return rearrange(x, "b t (h dh) -> b h t dh", h=heads or self.num_heads)  # (B, H, T, Dh)

    def project_q(self, query: torch.Tensor) -> torch.Tensor:
        """``(B, T, D)`` -> queries ``(B, H, T, Dh)``."""
        check_3d(query, "query", self.d_model)
        return self._split(self.q_proj(query))

    def project_kv(self, key: torch.Tensor, value: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(B, S, D)`` -> keys and values ``(B, G, S, Dh)``; exposed so a decoder can cache them."""
        check_3d(key, "key", self.d_model)
        check_3d(value, "value", self.d_model)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"value: expected (B, S) = {tuple(key.shape[:2])} as in key, got shape {tuple(value.shape)}")
        G = self.num_kv_heads
        return self._split(self.k_proj(key), G), self._split(self.v_proj(value), G)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_stacked"] = None  # views of the projections' storage: rebuilt on use
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._share_qkv_storage()  # copies (deepcopy, pickle) hold each parameter alone: share again

    def _apply(self, *args, **kwargs):
        module = super()._apply(*args, **kwargs)  # .to(), .cuda(), .half(), ... convert each parameter alone
        self._share_qkv_storage()
        return module

    def _share_qkv_storage(self) -> None:
        """Move the q, k and v projections' weights (and biases) into one storage each, as consecutive
        views of it: the values stay, the parameters stay three (and their state-dict keys), and without
        gradients :meth:`project_qkv` reads the three as one ``((H + 2G) Dh, D)`` matrix, a view, no copy."""
        self._stacked = None
        mods = (self.q_proj, self.k_proj, self.v_proj)
        with torch.no_grad():
            for name in ("weight", "bias"):
                params = [getattr(m, name) for m in mods]
                if any(p is None for p in params) or len({(p.dtype, p.device) for p in params}) != 1:
                    continue
                stacked = torch.cat([p.detach() for p in params])
                start = 0
                for p in params:
                    p.data = stacked[start:start + p.shape[0]]
                    start += p.shape[0]

    def _stacked_qkv(self):
        """``(weight, bias)`` of the three projections as one matrix (views of their shared storage), or
        None when they no longer share one (e.g. parameters replaced by ``load_state_dict(assign=True)``)."""
        params = [self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]
        if self.q_proj.bias is not None:
            params += [self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]
        key = tuple((p.data_ptr(), p.shape, p.dtype) for p in params)
        stacked = getattr(self, "_stacked", None)
        if stacked is None or stacked[0] != key:
            weight, bias = _consecutive(params[:3]), _consecutive(params[3:]) if len(params) == 6 else None
            ok = weight is not None and (len(params) == 3 or bias is not None)
            self._stacked = stacked = (key, weight, bias) if ok else None
        return stacked[1:] if stacked is not None else None

    def project_qkv(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention projections in one matrix product: ``(B, T, D)`` -> ``(B, H, T, Dh)``, ``(B, G, T, Dh)`` twice.

        The three weight matrices lie one after another in one storage (their parameters are views of
        it, kept so through conversions and copies). Where gradients flow to them (training) they are
        stacked for the call, so that each gets its gradient; otherwise (inference, generation) the
        stacked matrix is a view of that storage: nothing is copied.
        """
        check_3d(x, "query", self.d_model)
        H, G, Dh = self.num_heads, self.num_kv_heads, self.head_dim
        q_proj, k_proj, v_proj = self.q_proj, self.k_proj, self.v_proj
        grads = torch.is_grad_enabled() and (q_proj.weight.requires_grad or k_proj.weight.requires_grad
                                             or v_proj.weight.requires_grad
                                             or (q_proj.bias is not None and (q_proj.bias.requires_grad or
                                                 k_proj.bias.requires_grad or v_proj.bias.requires_grad)))
        stacked = None if grads else self._stacked_qkv()
        if stacked is None:
            weight = torch.cat([q_proj.weight, k_proj.weight, v_proj.weight])  # ((H + 2G) Dh, D), for this call
            bias = torch.cat([q_proj.bias, k_proj.bias, v_proj.bias]) if q_proj.bias is not None else None
        else:
            weight, bias = stacked
        if G == H:
            qkv = rearrange(F.linear(x, weight, bias), "b t (three h dh) -> three b h t dh", three=3, h=H)
            return qkv[0], qkv[1], qkv[2]  # (B, H, T, Dh) each
        q, k, v = F.linear(x, weight, bias).split([H * Dh, G * Dh, G * Dh], dim=-1)
        return self._split(q, H), self._split(k, G), self._split(v, G)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               attn_mask: Optional[torch.Tensor] = None, need_weights: bool = False,
               is_causal: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Attention over projected heads ``q (B, H, T, Dh)``, ``k, v (B, G, S, Dh)``, then merge heads and ``out_proj``.

        With ``G < H`` key/value head ``g`` serves query heads ``g * H/G .. (g + 1) * H/G - 1``."""
        if q.shape[0] != k.shape[0]:
            raise ValueError(f"key: expected batch size {q.shape[0]} as in query, got {k.shape[0]}")
        if k.shape[1] != self.num_kv_heads or v.shape[1] != self.num_kv_heads:
            raise ValueError(f"k, v: expected {self.num_kv_heads} key/value heads (dim 1), "
                             f"got k {tuple(k.shape)}, v {tuple(v.shape)}")
        grouped = self.num_kv_heads != self.num_heads
        if grouped and (need_weights or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                                                      or v.requires_grad))):
            groups = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (B, H, S, Dh)
            grouped = False
        B, H, T, _ = q.shape
        S = k.shape[2]
        if attn_mask is not None:
            check_mask_broadcasts(attn_mask, (B, H, T, S))
        if is_causal and T == 1 and not need_weights:
            is_causal = False  # one query, the last position: it may attend to every key, no mask to build
        if is_causal and (need_weights or attn_mask is not None or T != S):
            causal = causal_mask(T, S, device=q.device)  # (T, S)
            attn_mask = causal if attn_mask is None else attn_mask & causal
            is_causal = False
        p = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p=p)
        elif grouped:
            out, weights = _grouped_attention(q, k, v, attn_mask, p, is_causal), None  # K, V read in place
        else:
            out, weights = _fused_attention(q, k, v, attn_mask, p, is_causal), None
        out = rearrange(out, "b h t dh -> b t (h dh)")  # (B, T, D)
        return self.out_proj(out), weights

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attn_mask: Optional[torch.Tensor] = None, need_weights: bool = False,
                is_causal: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        if query is key and key is value:
            q, k, v = self.project_qkv(query)
        else:
            q = self.project_q(query)
            k, v = self.project_kv(key, value)
            if query.shape[0] != key.shape[0]:
                raise ValueError(f"key: expected batch size {query.shape[0]} as in query, got {key.shape[0]} "
                                 f"(query {tuple(query.shape)}, key {tuple(key.shape)})")
        return self.attend(q, k, v, attn_mask, need_weights, is_causal)
