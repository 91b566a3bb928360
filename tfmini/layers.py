"""Transformer layers: position-wise feed-forward, encoder layer and decoder layer.

Shapes: B batch, T target length, S source length, D d_model, H heads, Dh head width.
Sub-module names follow ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
(``self_attn``, ``multihead_attn``, ``norm1..3``; the feed-forward's ``linear1``/``linear2``)
so that weights can be copied between the two and the outputs compared.

``norm_first=False`` is the paper's post-LN "Add & Norm": ``x = LayerNorm(x + Sublayer(x))``.
``norm_first=True`` is pre-LN: ``x = x + Sublayer(LayerNorm(x))``, what most models now use.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention

__all__ = ["FeedForward", "EncoderLayer", "DecoderLayer"]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class FeedForward(nn.Module):
    r"""Position-wise feed-forward network :math:`\mathrm{FFN}(x) = W_2\,\mathrm{act}(W_1 x + b_1) + b_2`.

    Applied to every position independently; the paper uses ``d_ff = 4 * d_model`` and ReLU.

    Args:
        d_model: input and output width ``D``.
        d_ff: inner width.
        dropout: dropout after the activation (training only).
        activation: ``"relu"`` or ``"gelu"``.

    Shape:
        ``(..., D)`` -> ``(..., D)``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation: expected one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = _ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in a residual connection and LayerNorm.

    Args:
        d_model, num_heads, d_ff, dropout: as in the paper (``d_ff`` defaults to ``4 * d_model``).
        norm_first: False = post-LN (the paper), True = pre-LN.
        activation: ``"relu"`` or ``"gelu"``.
        layer_norm_eps: the ``eps`` of both LayerNorms.

    ``forward(x, mask=None, need_weights=False, is_causal=False)`` returns ``(x, weights)``; the
    weights are None unless ``need_weights``, and ``is_causal`` adds a causal mask.

    Shape:
        x ``(B, T, D)``, mask bool broadcastable to ``(B, H, T, T)`` -> ``(B, T, D)``
        (and self-attention weights ``(B, H, T, T)`` when ``need_weights``).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: Optional[int] = None, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ff = FeedForward(d_model, d_ff or 4 * d_model, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, need_weights: bool = False,
                is_causal: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        def sa(h):
            out, w = self.self_attn(h, h, h, attn_mask=mask, need_weights=need_weights, is_causal=is_causal)
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
        activation: ``"relu"`` or ``"gelu"``.
        layer_norm_eps: the ``eps`` of the LayerNorms.
        cross_attention: False drops cross-attention (and its LayerNorm).

    ``forward(x, memory=None, self_mask=None, memory_mask=None, cache=None, need_weights=False,
    is_causal=False)`` returns ``(x, weights)``.

    Incremental decoding: pass a dict as ``cache``. The layer appends the new positions' keys and
    values to ``cache["k"], cache["v"]`` (``(B, H, t, Dh)``) and computes the encoder's keys and
    values once into ``cache["memory_k"], cache["memory_v"]``. ``x`` then holds only the new
    positions and ``self_mask`` must cover all cached keys; ``is_causal=True`` does this for you
    (query ``i`` of the new positions sees the cache and new positions up to its own).

    Shape:
        x ``(B, T, D)``, memory ``(B, S, D)``, self_mask broadcastable to ``(B, H, T, T)``,
        memory_mask broadcastable to ``(B, H, T, S)`` -> ``(B, T, D)`` and a dict of weights
        ``{"self": (B, H, T, T), "cross": (B, H, T, S)}`` (entries None unless ``need_weights``).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: Optional[int] = None, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5,
                 cross_attention: bool = True):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.multihead_attn = MultiHeadAttention(d_model, num_heads, dropout) if cross_attention else None
        self.ff = FeedForward(d_model, d_ff or 4 * d_model, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps) if cross_attention else None
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _self_block(self, h, mask, cache, need_weights, is_causal):
        q, k, v = self.self_attn.project_qkv(h)  # (B, H, T, Dh) each
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)  # (B, H, t + T, Dh)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        out, w = self.self_attn.attend(q, k, v, mask, need_weights, is_causal)
        return self.dropout1(out), w

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
        return self.dropout2(out), w

    def forward(self, x: torch.Tensor, memory: Optional[torch.Tensor] = None,
                self_mask: Optional[torch.Tensor] = None, memory_mask: Optional[torch.Tensor] = None,
                cache: Optional[Dict[str, torch.Tensor]] = None, need_weights: bool = False,
                is_causal: bool = False) -> Tuple[torch.Tensor, Dict[str, Optional[torch.Tensor]]]:
        weights: Dict[str, Optional[torch.Tensor]] = {"self": None, "cross": None}
        if self.norm_first:
            out, weights["self"] = self._self_block(self.norm1(x), self_mask, cache, need_weights, is_causal)
            x = x + out
            if self.multihead_attn is not None:
                out, weights["cross"] = self._cross_block(self.norm2(x), memory, memory_mask, cache, need_weights)
                x = x + out
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            out, weights["self"] = self._self_block(x, self_mask, cache, need_weights, is_causal)
            x = self.norm1(x + out)
            if self.multihead_attn is not None:
                out, weights["cross"] = self._cross_block(x, memory, memory_mask, cache, need_weights)
                x = self.norm2(x + out)
            x = self.norm3(x + self.dropout3(self.ff(x)))
        return x, weights
