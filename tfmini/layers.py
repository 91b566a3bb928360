"""Transformer layers: normalisation, position-wise feed-forward (plain and gated), encoder layer and decoder layer.

Shapes: B batch, T target length, S source length, D d_model, H heads, Dh head width.
Sub-module names follow ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
(``self_attn``, ``multihead_attn``, ``norm1..3``; the feed-forward's ``linear1``/``linear2``)
so that weights can be copied between the two and the outputs compared.

``norm_first=False`` is the paper's post-LN "Add & Norm": ``x = LayerNorm(x + Sublayer(x))``.
``norm_first=True`` is pre-LN: ``x = x + Sublayer(LayerNorm(x))``, what most models now use.

The pieces of today's decoders (Llama and its relatives) are options of the same layers:
``norm="rmsnorm"`` (:class:`RMSNorm`), ``activation="swiglu"`` (:class:`SwiGLU`), ``num_kv_heads``
(grouped-query attention, :class:`~tfmini.attention.MultiHeadAttention`) and ``rope``, the rotary
positions applied to queries and keys (:func:`~tfmini.positional.apply_rope`).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention
from .positional import apply_rope, rotate_half

__all__ = ["RMSNorm", "FeedForward", "SwiGLU", "EncoderLayer", "DecoderLayer", "make_norm", "make_ffn"]


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": _gelu_tanh}
NORMS = ("layernorm", "rmsnorm")
FFN_ACTIVATIONS = (*_ACTIVATIONS, "swiglu")


class RMSNorm(nn.Module):
    r"""Root-mean-square normalisation (Zhang and Sennrich, 2019), the norm of Llama.

    .. math:: \mathrm{RMSNorm}(\mathbf x) = \frac{\mathbf x}{\sqrt{\tfrac1d \sum_j x_j^2 + \epsilon}} \odot \boldsymbol\gamma

    LayerNorm without the centring and without the bias: one gain vector ``weight`` (initialised to
    ones). Computed in float32 and cast back, as Hugging Face's Llama does, so half-precision inputs
    do not overflow in the sum of squares. Equal to ``torch.nn.RMSNorm`` (torch >= 2.4) in float32.

    Args:
        d_model: width ``D`` of the normalised last dimension.
        eps: added to the mean square.

    Shape:
        ``(..., D)`` -> ``(..., D)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.weight.shape[0]:
            raise ValueError(f"x: expected last dimension {self.weight.shape[0]}, got shape {tuple(x.shape)}")
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on queries or keys ``x (B, H, T, Dh)``: :func:`~tfmini.positional.apply_rope` for tables
    ``(T, Dh)`` shared by the batch, the same formula for per-sequence tables ``(B, T, Dh)`` (the
    positions of left-padded sequences differ from row to row)."""
    if cos.dim() == 2:
        return apply_rope(x, cos, sin)
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)  # (B, 1, T, Dh): every head alike
    return x * cos + rotate_half(x) * sin


def _drop(dropout: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``dropout(x)`` in training; in eval mode, where dropout is the identity, ``x`` without the call
    (a decoding step saves one module call per dropout)."""
    return dropout(x) if dropout.training else x


def make_norm(norm: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """The norm a config names.

    Args:
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        d_model: the normalised width ``D``.
        eps: the norm's ``eps``.

    Returns:
        ``nn.LayerNorm(d_model, eps)`` or :class:`RMSNorm` ``(d_model, eps)``.

    Shape:
        the module maps ``(..., D)`` -> ``(..., D)``.
    """
    if norm == "layernorm":
        return nn.LayerNorm(d_model, eps=eps)
    if norm == "rmsnorm":
        return RMSNorm(d_model, eps=eps)
    raise ValueError(f"norm: expected one of {list(NORMS)}, got {norm!r}")


class FeedForward(nn.Module):
    r"""Position-wise feed-forward network :math:`\mathrm{FFN}(\mathbf x) = \mathrm{act}(\mathbf x W_1 + \mathbf b_1)\,W_2 + \mathbf b_2`.

    Applied to every position independently; the paper uses ``d_ff = 4 * d_model`` and ReLU.

    Args:
        d_model: input and output width ``D``.
        d_ff: inner width.
        dropout: dropout after the activation (training only).
        activation: ``"relu"``, ``"gelu"`` or ``"gelu_tanh"`` (GELU's tanh approximation, GPT-2's).
        bias: whether the two linear maps have biases.

    Shape:
        ``(..., D)`` -> ``(..., D)``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu", bias: bool = True):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation: expected one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.activation = _ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(_drop(self.dropout, self.activation(self.linear1(x))))


class SwiGLU(nn.Module):
    r"""Gated feed-forward network with a SiLU gate (Shazeer, 2020), the FFN of Llama.

    .. math:: \mathrm{SwiGLU}(\mathbf x) = \big(\mathrm{silu}(\mathbf x W_\text{gate}) \odot \mathbf x W_1\big)\,W_2

    Three matrices instead of two: with ``d_ff = 2/3 * 4 * d_model`` it has the parameters of the
    ``4 * d_model`` ReLU network. Hugging Face's Llama calls the maps ``gate_proj`` (``linear_gate``),
    ``up_proj`` (``linear1``) and ``down_proj`` (``linear2``).

    Args:
        d_model: input and output width ``D``.
        d_ff: inner width.
        dropout: dropout on the gated product (training only).
        bias: whether the three linear maps have biases.

    Shape:
        ``(..., D)`` -> ``(..., D)``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.linear_gate = nn.Linear(d_model, d_ff, bias=bias)
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(_drop(self.dropout, F.silu(self.linear_gate(x)) * self.linear1(x)))


def make_ffn(d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu", bias: bool = True) -> nn.Module:
    """The feed-forward network a config names.

    Args:
        d_model: input and output width ``D``.
        d_ff: inner width.
        dropout: dropout inside the network (training only).
        activation: ``"swiglu"``, or an activation of :class:`FeedForward`.
        bias: whether the linear maps have biases.

    Returns:
        :class:`SwiGLU` for ``activation="swiglu"``, else :class:`FeedForward` with that activation.

    Shape:
        the module maps ``(..., D)`` -> ``(..., D)``.
    """
    if activation == "swiglu":
        return SwiGLU(d_model, d_ff, dropout, bias)
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation: expected one of {list(FFN_ACTIVATIONS)}, got {activation!r}")
    return FeedForward(d_model, d_ff, dropout, activation, bias)


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in a residual connection and LayerNorm.

    Args:
        d_model, num_heads, d_ff, dropout: as in the paper (``d_ff`` defaults to ``4 * d_model``).
        norm_first: False = post-LN (the paper), True = pre-LN.
        activation: ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` or ``"swiglu"`` (:func:`make_ffn`).
        layer_norm_eps: the ``eps`` of both norms.
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        num_kv_heads, head_dim, attention_bias: of the self-attention (:class:`~tfmini.attention.MultiHeadAttention`).
        ffn_bias: whether the feed-forward's linear maps have biases.

    ``forward(x, mask=None, need_weights=False, is_causal=False, rope=None)`` returns ``(x, weights)``;
    the weights are None unless ``need_weights``, ``is_causal`` adds a causal mask and ``rope``, a pair
    ``(cos, sin)`` of ``(T, Dh)`` tables (or ``(B, T, Dh)``, one per sequence), rotates queries and keys
    (:func:`~tfmini.positional.apply_rope`).

    Shape:
        x ``(B, T, D)``, mask bool broadcastable to ``(B, H, T, T)`` -> ``(B, T, D)``
        (and self-attention weights ``(B, H, T, T)`` when ``need_weights``).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: Optional[int] = None, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5,
                 norm: str = "layernorm", num_kv_heads: Optional[int] = None, head_dim: Optional[int] = None,
                 attention_bias: bool = True, ffn_bias: bool = True):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout, attention_bias, num_kv_heads, head_dim)
        self.ff = make_ffn(d_model, d_ff or 4 * d_model, dropout, activation, ffn_bias)
        self.norm1 = make_norm(norm, d_model, layer_norm_eps)
        self.norm2 = make_norm(norm, d_model, layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, need_weights: bool = False,
                is_causal: bool = False, rope: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        def sa(h):
            if rope is None:
                out, w = self.self_attn(h, h, h, attn_mask=mask, need_weights=need_weights, is_causal=is_causal)
            else:
                q, k, v = self.self_attn.project_qkv(h)
                q, k = _rotate(q, *rope), _rotate(k, *rope)
                out, w = self.self_attn.attend(q, k, v, mask, need_weights, is_causal)
            return self.dropout1(out), w

        if self.norm_first:
            out, weights = sa(self.norm1(x))
            x = x + out
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            out, weights = sa(x)
            x = self.norm1(x + out)
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, feed-forward.

    With ``cross_attention=False`` the layer has only masked self-attention and feed-forward:
    the block of a decoder-only language model.

    Args:
        d_model, num_heads, d_ff, dropout: as in the paper (``d_ff`` defaults to ``4 * d_model``).
        norm_first: False = post-LN (the paper), True = pre-LN.
        activation: ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` or ``"swiglu"`` (:func:`make_ffn`).
        layer_norm_eps: the ``eps`` of the norms.
        cross_attention: False drops cross-attention (and its norm).
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        num_kv_heads, head_dim, attention_bias: of the attention layers (:class:`~tfmini.attention.MultiHeadAttention`).
        ffn_bias: whether the feed-forward's linear maps have biases.

    ``forward(x, memory=None, self_mask=None, memory_mask=None, cache=None, need_weights=False,
    is_causal=False, rope=None)`` returns ``(x, weights)``; ``rope``, a pair ``(cos, sin)`` of
    ``(T, Dh)`` tables for the new positions (or ``(B, T, Dh)``, when each sequence has its own
    positions), rotates the self-attention's queries and keys.

    Incremental decoding: pass a dict as ``cache``. The layer appends the new positions' keys and
    values to ``cache["k"], cache["v"]`` (``(B, G, t, Dh)``, G key/value heads; rotated keys when
    ``rope`` is given) and computes the encoder's keys and
    values once into ``cache["memory_k"], cache["memory_v"]``. A layer of a
    :class:`~tfmini.model.KVCache` writes the new keys and values into buffers allocated ahead
    (its ``append_kv``), and ``cache["k"]`` is a view of their first ``t`` positions; a plain dict gets
    new tensors, the old ones concatenated with the new. ``x`` then holds only the new
    positions and ``self_mask`` must cover all cached keys; ``is_causal=True`` does this for you
    (query ``i`` of the new positions sees the cache and new positions up to its own).

    Shape:
        x ``(B, T, D)``, memory ``(B, S, D)``, self_mask broadcastable to ``(B, H, T, T)``,
        memory_mask broadcastable to ``(B, H, T, S)`` -> ``(B, T, D)`` and a dict of weights
        ``{"self": (B, H, T, T), "cross": (B, H, T, S)}`` (entries None unless ``need_weights``).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: Optional[int] = None, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5,
                 cross_attention: bool = True, norm: str = "layernorm", num_kv_heads: Optional[int] = None,
                 head_dim: Optional[int] = None, attention_bias: bool = True, ffn_bias: bool = True):
        super().__init__()
        self.norm_first = norm_first
        attn = dict(dropout=dropout, bias=attention_bias, num_kv_heads=num_kv_heads, head_dim=head_dim)
        self.self_attn = MultiHeadAttention(d_model, num_heads, **attn)
        self.multihead_attn = MultiHeadAttention(d_model, num_heads, **attn) if cross_attention else None
        self.ff = make_ffn(d_model, d_ff or 4 * d_model, dropout, activation, ffn_bias)
        self.norm1 = make_norm(norm, d_model, layer_norm_eps)
        self.norm2 = make_norm(norm, d_model, layer_norm_eps) if cross_attention else None
        self.norm3 = make_norm(norm, d_model, layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _self_block(self, h, mask, cache, need_weights, is_causal, rope):
        q, k, v = self.self_attn.project_qkv(h)  # (B, H, T, Dh), (B, G, T, Dh), (B, G, T, Dh)
        if rope is not None:
            q, k = _rotate(q, *rope), _rotate(k, *rope)
        if cache is not None:
            append = getattr(cache, "append_kv", None)  # a KVCache's layer: written into its preallocated buffers
            if append is not None:
                k, v = append(k, v)  # (B, G, t + T, Dh)
            else:
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)  # (B, G, t + T, Dh)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        out, w = self.self_attn.attend(q, k, v, mask, need_weights, is_causal)
        return _drop(self.dropout1, out), w

    def _cross_block(self, h, memory, mask, cache, need_weights):
        if cache is not None and "memory_k" in cache:
            k, v = cache["memory_k"], cache["memory_v"]
        else:
            if memory is None:
                raise ValueError("memory: expected the encoder output (B, S, D) for a layer with cross-attention, got None")
            k, v = self.multihead_attn.project_kv(memory, memory)  # (B, H, S, Dh)
            if cache is not None:
                cache["memory_k"], cache["memory_v"] = k, v
        out, w = self.multihead_attn.attend(self.multihead_attn.project_q(h), k, v, mask, need_weights)
        return _drop(self.dropout2, out), w

    def forward(self, x: torch.Tensor, memory: Optional[torch.Tensor] = None,
                self_mask: Optional[torch.Tensor] = None, memory_mask: Optional[torch.Tensor] = None,
                cache: Optional[Dict[str, torch.Tensor]] = None, need_weights: bool = False,
                is_causal: bool = False, rope: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                ) -> Tuple[torch.Tensor, Dict[str, Optional[torch.Tensor]]]:
        weights: Dict[str, Optional[torch.Tensor]] = {"self": None, "cross": None}
        if self.norm_first:
            out, weights["self"] = self._self_block(self.norm1(x), self_mask, cache, need_weights, is_causal, rope)
            x = x + out
            if self.multihead_attn is not None:
                out, weights["cross"] = self._cross_block(self.norm2(x), memory, memory_mask, cache, need_weights)
                x = x + out
            x = x + _drop(self.dropout3, self.ff(self.norm3(x)))
        else:
            out, weights["self"] = self._self_block(x, self_mask, cache, need_weights, is_causal, rope)
            x = self.norm1(x + out)
            if self.multihead_attn is not None:
                out, weights["cross"] = self._cross_block(x, memory, memory_mask, cache, need_weights)
                x = self.norm2(x + out)
            x = self.norm3(x + _drop(self.dropout3, self.ff(x)))
        return x, weights
