"""Full models from one config: the encoder-decoder Transformer, a decoder-only language model and an
encoder-only masked language model.

Shapes: B batch, S source length, T target length, D d_model, V vocabulary size.
Token sequences are right-padded with ``config.pad_id``; a target sequence starts with BOS.

Both models support incremental decoding for :mod:`tfmini.decoding` through two methods:
``start_decoding(...) -> state`` and ``decode_next(ys, state, use_cache) -> logits (B, V)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import torch
from torch import nn

from ._checks import check_token_ids
from .layers import FFN_ACTIVATIONS, NORMS, DecoderLayer, EncoderLayer, make_norm
from .masks import attention_mask, causal_mask
from .positional import LearnedPositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding

__all__ = ["TransformerConfig", "KVCache", "LayerKVCache", "TokenEmbedding", "Encoder", "Decoder", "Transformer", "DecoderOnlyLM", "EncoderOnlyLM"]


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of :class:`Transformer`, :class:`DecoderOnlyLM` and :class:`EncoderOnlyLM`.

    Args:
        vocab_size: target vocabulary (the only vocabulary of a decoder-only or encoder-only model).
        src_vocab_size: source vocabulary; defaults to ``vocab_size``.
        d_model, num_heads, d_ff, dropout: as in the paper; ``d_ff`` defaults to ``4 * d_model``.
        num_encoder_layers, num_decoder_layers: stack depths (a decoder-only model uses the latter).
        max_len: longest sequence the positional encoding covers.
        norm_first: False = post-LN (the paper), True = pre-LN (with a final norm per stack).
        positional: ``"sinusoidal"``, ``"learned"`` or ``"rope"`` (rotary positions on queries and keys).
        tie_weights: share the target embedding matrix with the output projection.
        activation: ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` or ``"swiglu"`` (a gated FFN) in the feed-forward networks.
        pad_id: id of the padding token (masked out as a key).
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        norm_eps: the ``eps`` of every norm.
        num_kv_heads: key/value heads of grouped-query attention (default ``num_heads``: multi-head attention).
        head_dim: width of a head (default ``d_model // num_heads``).
        attention_bias, ffn_bias: whether the attention projections and the feed-forward maps have biases.
        embed_scale: multiply token embeddings by ``sqrt(d_model)`` (the paper); GPT-2, BERT and Llama do not.
        rope_theta: base of RoPE's frequencies.
        embed_norm: a norm (and dropout) after adding positions to the embeddings, as BERT has.
        type_vocab_size: number of token types (BERT's segments A/B); 0 = none.
        mlm_transform: an encoder-only model's output head is BERT's (dense, activation, LayerNorm, then the
            projection with a bias) instead of one projection.

    Defaults give the Transformer of Vaswani et al.; :func:`tfmini.huggingface.from_huggingface` sets the options
    of GPT-2, BERT and Llama, and ``norm="rmsnorm", positional="rope", activation="swiglu",
    num_kv_heads=G`` with ``norm_first=True`` and no biases is a Llama-style decoder.
    """

    vocab_size: int
    src_vocab_size: Optional[int] = None
    d_model: int = 128
    num_heads: int = 4
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    d_ff: Optional[int] = None
    dropout: float = 0.1
    max_len: int = 512
    norm_first: bool = False
    positional: str = "sinusoidal"
    tie_weights: bool = True
    activation: str = "relu"
    pad_id: int = 0
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    num_kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    attention_bias: bool = True
    ffn_bias: bool = True
    embed_scale: bool = True
    rope_theta: float = 10000.0
    embed_norm: bool = False
    type_vocab_size: int = 0
    mlm_transform: bool = False

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "num_heads", "max_len"):   # before d_model % num_heads
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if self.head_dim is None and self.d_model % self.num_heads:
            raise ValueError(f"d_model: expected a multiple of num_heads={self.num_heads}, got d_model={self.d_model}")
        if self.head_dim is not None and self.head_dim < 1:
            raise ValueError(f"head_dim: expected >= 1 or None, got {self.head_dim}")
        if self.num_kv_heads is not None and (self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads):
            raise ValueError(f"num_kv_heads: expected a divisor of num_heads={self.num_heads}, got {self.num_kv_heads}")
        if self.positional not in ("sinusoidal", "learned", "rope"):
            raise ValueError(f"positional: expected 'sinusoidal', 'learned' or 'rope', got {self.positional!r}")
        if self.positional == "rope" and self.head_width % 2:
            raise ValueError(f"head_dim: expected an even head width for positional='rope', got {self.head_width}")
        if self.norm not in NORMS:
            raise ValueError(f"norm: expected one of {list(NORMS)}, got {self.norm!r}")
        if self.activation not in FFN_ACTIVATIONS:
            raise ValueError(f"activation: expected one of {list(FFN_ACTIVATIONS)}, got {self.activation!r}")
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size: expected >= 0, got {self.type_vocab_size}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id: expected in [0, {self.vocab_size - 1}], got {self.pad_id}")

    @property
    def source_vocab_size(self) -> int:
        return self.src_vocab_size or self.vocab_size

    @property
    def ffn_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def head_width(self) -> int:
        """The width ``Dh`` of one attention head."""
        return self.head_dim or self.d_model // self.num_heads


class TokenEmbedding(nn.Module):
    r"""Token embedding scaled by :math:`\sqrt{d}` (section 3.4 of Vaswani et al., 2017), with id checks.

    Args:
        vocab_size: number of token ids.
        d_model: width ``D`` of the embeddings.
        scale: multiply by :math:`\sqrt{d}` (the paper). With ``scale=False`` (GPT-2, BERT, Llama) the
            embeddings are used as they are and initialised with standard deviation 0.02, as GPT-2's.

    ``forward(ids, name="ids", check_range=True)`` always checks the ids' shape and dtype (metadata
    only); ``check_range`` also checks that they lie in ``[0, vocab_size)``, which reads them (a
    synchronisation on a GPU). The models check the range once at their entry points and pass
    ``check_range=False`` here, so that decoding token by token never waits for the GPU.

    Shape: ids ``(B, T)`` -> ``(B, T, D)``.
    """

    def __init__(self, vocab_size: int, d_model: int, scale: bool = True):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model ** -0.5 if scale else 0.02)
        self.scale = math.sqrt(d_model) if scale else None

    def forward(self, ids: torch.Tensor, name: str = "ids", check_range: bool = True) -> torch.Tensor:
        check_token_ids(ids, self.embedding.num_embeddings, name, check_range)
        x = self.embedding(ids)
        return x if self.scale is None else x * self.scale


class LayerKVCache(dict):
    """One layer's part of a :class:`KVCache`: a dict whose ``"k"`` and ``"v"`` are the cached keys and
    values ``(B, G, t, Dh)`` (and, with cross-attention, ``"memory_k"``, ``"memory_v"``), as a plain dict.

    The keys and values live in buffers allocated ahead, ``(B, G, capacity, Dh)``; ``"k"`` and ``"v"`` are
    views of their first ``t`` positions. :meth:`append_kv` writes the new positions after them, so a
    decoding step copies only its own keys and values, never the earlier ones. A prompt's positions,
    written together, get a buffer of their own size (the prompt's pass needs its memory for the
    activations); the first step after them moves them, once, into a buffer of ``capacity`` positions.
    Without a ``capacity`` (or beyond it) a full buffer is replaced by one twice as long. An entry
    ``"k"`` or ``"v"`` replaced from outside is taken as the new content.

    Args:
        layer: the initial entries (default none).
        capacity: the number of positions the cache will hold, e.g. the prompt and all the tokens to
            generate (:meth:`KVCache.reserve` sets it); None: grow as needed.
    """

    def __init__(self, layer=(), capacity: Optional[int] = None):
        super().__init__(layer)
        self.capacity = capacity
        self._buffers = None  # (k, v) buffers (B, G, capacity, Dh) whose first t positions are self["k"], self["v"]

    def append_kv(self, k: torch.Tensor, v: torch.Tensor):
        """Append the keys and values of ``T`` new positions; return all of them.

        Shape:
            k, v ``(B, G, T, Dh)`` -> ``(B, G, t + T, Dh)`` each (views of the buffers, also stored as
            ``self["k"]``, ``self["v"]``).
        """
        t = self["k"].shape[2] if "k" in self else 0
        end = t + k.shape[2]
        bufs = self._buffers
        if (bufs is None or bufs[0].shape[2] < end or self.get("k") is not bufs[2] or self.get("v") is not bufs[3]
                or bufs[0].shape[:2] != k.shape[:2] or bufs[0].dtype != k.dtype or bufs[0].device != k.device):
            if self.capacity is not None and self.capacity >= end and not (t == 0 and k.shape[2] > 1):
                size = self.capacity  # the room reserved for the whole decoding
            elif bufs is not None and self.get("k") is bufs[2]:
                size = max(end, 2 * bufs[0].shape[2])  # a full buffer: grow geometrically
            else:  # the first positions (a prompt's pass: its activations need the memory now), or no reservation
                size = end
            B, G, _, Dh = k.shape
            kb, vb = k.new_empty(B, G, size, Dh), v.new_empty(B, G, size, v.shape[-1])  # (B, G, capacity, Dh)
            if t:
                kb[:, :, :t] = self["k"]
                vb[:, :, :t] = self["v"]
            bufs = (kb, vb)
        kb, vb = bufs[0], bufs[1]
        kb[:, :, t:end] = k
        vb[:, :, t:end] = v
        self["k"], self["v"] = kb[:, :, :end], vb[:, :, :end]  # (B, G, t + T, Dh)
        self._buffers = (kb, vb, self["k"], self["v"])
        return self["k"], self["v"]

    def index_select(self, index: torch.Tensor) -> "LayerKVCache":
        """The cache of the batch rows ``index`` (beam search's reordering), buffers and their room included.

        Shape:
            every tensor ``(B, ...)`` -> ``(N, ...)``.
        """
        out = LayerKVCache({name: x.index_select(0, index) if isinstance(x, torch.Tensor) else x
                            for name, x in self.items() if name not in ("k", "v")}, self.capacity)
        bufs = self._buffers
        if bufs is not None and self.get("k") is bufs[2] and self.get("v") is bufs[3]:
            t = self["k"].shape[2]
            kb, vb = bufs[0].index_select(0, index), bufs[1].index_select(0, index)
            out["k"], out["v"] = kb[:, :, :t], vb[:, :, :t]
            out._buffers = (kb, vb, out["k"], out["v"])
        else:
            out.update({name: self[name].index_select(0, index) for name in ("k", "v") if name in self})
        return out


class KVCache(list):
    """The KV cache of a decoder: one :class:`LayerKVCache` (a dict) per layer, which the layer fills with
    ``"k"`` and ``"v"`` ``(B, G, t, Dh)`` (and, with cross-attention, the encoder's ``"memory_k"``, ``"memory_v"``).

    A list, so that :func:`tfmini.decoding.select_batch` reorders it like any other state, with two
    additions: :attr:`length`, the number of positions already cached, ``t``, and :meth:`reserve`.
    The keys and values of each layer are written into buffers allocated ahead: a step adds its own
    positions without copying the earlier ones.

    Args:
        layers: the per-layer dicts (default: none; a decoder's ``new_cache()`` makes one per layer);
            a plain dict is copied into a :class:`LayerKVCache`.

    Shape:
        each layer's ``"k"`` and ``"v"``: ``(B, G, t, Dh)``.
    """

    def __init__(self, layers=()):
        super().__init__(layer if isinstance(layer, LayerKVCache) else LayerKVCache(layer) for layer in layers)

    @property
    def length(self) -> int:
        """Positions cached so far (0 before the first step)."""
        return _cached_length(self)

    def reserve(self, positions: int) -> None:
        """Allocate room for ``positions`` positions in all, at the first step after the prompt (decoding
        calls it with the prompt's length plus the number of tokens to generate, so the buffers are
        allocated once, not grown).

        Args:
            positions: the total number of positions the cache will hold.
        """
        for layer in self:
            layer.capacity = positions


def _cached_length(cache) -> int:
    """Positions in a KV cache (a :class:`KVCache` or a plain list of per-layer dicts; 0 for None or empty)."""
    return cache[0]["k"].shape[2] if cache and "k" in cache[0] else 0


def _check_ids(ids: torch.Tensor, cfg: TransformerConfig, vocab_size: int, name: str) -> None:
    """Ids in the vocabulary and no more positions than the positional table holds, errors naming ``name``."""
    check_token_ids(ids, vocab_size, name)
    if ids.shape[1] > cfg.max_len:
        raise ValueError(f"{name}: expected at most max_len={cfg.max_len} positions (the positional table), "
                         f"got shape {tuple(ids.shape)}")


def _init_embeddings(stack: nn.Module, cfg: TransformerConfig, vocab_size: int) -> None:
    """Give a stack its input modules: ``embed`` (tokens), ``pos`` (absolute positions, or only the
    dropout for RoPE, whose tables go to ``rope``), ``token_type`` and ``embed_norm`` where configured."""
    stack.embed = TokenEmbedding(vocab_size, cfg.d_model, cfg.embed_scale)
    drop = 0.0 if cfg.embed_norm else cfg.dropout  # BERT: the norm comes between the sum and the dropout
    if cfg.positional == "sinusoidal":
        stack.pos = SinusoidalPositionalEncoding(cfg.d_model, cfg.max_len, drop)
    elif cfg.positional == "learned":
        stack.pos = LearnedPositionalEncoding(cfg.d_model, cfg.max_len, drop)
    else:
        stack.pos = nn.Dropout(drop)
    stack.rope = RotaryEmbedding(cfg.head_width, cfg.max_len, cfg.rope_theta) if cfg.positional == "rope" else None
    stack.token_type = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
    if stack.token_type is not None:
        nn.init.normal_(stack.token_type.weight, std=0.02)
    stack.embed_norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if cfg.embed_norm else None
    stack.embed_drop = nn.Dropout(cfg.dropout) if cfg.embed_norm else None


def _embed(stack: nn.Module, ids: torch.Tensor, name: str, check_range: bool, offset: int = 0,
           token_type_ids: Optional[torch.Tensor] = None, positions: Optional[torch.Tensor] = None):
    """A stack's input ``(B, T, D)`` for ``ids (B, T)`` at positions ``offset ..`` (or at ``positions (B, T)``,
    one row of positions per sequence), and RoPE's ``(cos, sin)`` tables for those positions (None
    without RoPE): ``(T, Dh)`` each, or ``(B, T, Dh)`` with ``positions``."""
    x = stack.embed(ids, name, check_range)
    if positions is not None:
        if stack.rope is not None:
            rope, x = (stack.rope.cos[positions], stack.rope.sin[positions]), stack.pos(x)  # (B, T, Dh) each
        elif isinstance(stack.pos, SinusoidalPositionalEncoding):
            rope, x = None, stack.pos.drop(x + stack.pos.pe[positions].to(x.dtype))
        else:
            rope, x = None, stack.pos.drop(x + stack.pos.embedding(positions).to(x.dtype))
    elif stack.rope is not None:
        rope, x = stack.rope(ids.shape[1], offset), stack.pos(x)
    else:
        rope, x = None, stack.pos(x, offset=offset)
    if stack.token_type is not None:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(ids)
        elif token_type_ids.shape != ids.shape:
            raise ValueError(f"token_type_ids: expected shape {tuple(ids.shape)} as ids, got {tuple(token_type_ids.shape)}")
        x = x + stack.token_type(token_type_ids)
    if stack.embed_norm is not None:
        x = stack.embed_drop(stack.embed_norm(x))
    return x, rope


def _check_attention_mask(mask, ids: torch.Tensor) -> torch.Tensor:
    """A bool ``(B, T)`` mask of the real tokens of ids ``(B, T)``, with at least one in every row;
    errors name ``attention_mask``."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != ids.shape:
        got = f"{mask.dtype} of shape {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"attention_mask: expected a bool tensor of shape {tuple(ids.shape)} as the ids (True = real "
                         f"token; a tokenizer's 0/1 mask becomes one with .bool()), got {got}")
    empty = (~mask.any(dim=1)).nonzero()[:, 0].tolist()  # one read on the host
    if empty:
        raise ValueError(f"attention_mask: expected at least one real token (True) in every row, got none in rows {empty}")
    return mask


def _positions(mask: torch.Tensor, T: int) -> torch.Tensor:
    """The positions of the last ``T`` tokens, counted over the real tokens of ``mask (B, S)`` (a padding
    position gets 0), as Hugging Face's ``generate`` numbers a left-padded batch.

    Shape: mask ``(B, S)`` -> ``(B, T)``.
    """
    return (mask.long().cumsum(-1) - 1).masked_fill(~mask, 0)[:, mask.shape[1] - T:]  # (B, T)


def _layer_kwargs(cfg: TransformerConfig) -> dict:
    return dict(d_model=cfg.d_model, num_heads=cfg.num_heads, d_ff=cfg.ffn_dim, dropout=cfg.dropout,
                norm_first=cfg.norm_first, activation=cfg.activation, layer_norm_eps=cfg.norm_eps,
                norm=cfg.norm, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
                attention_bias=cfg.attention_bias, ffn_bias=cfg.ffn_bias)


class Encoder(nn.Module):
    """Embedding, positions and a stack of :class:`~tfmini.layers.EncoderLayer`.

    Args:
        cfg: the model's :class:`TransformerConfig`.

    ``forward(src, need_weights=False, check_range=True, token_type_ids=None)``: ``check_range=False``
    skips the check that the ids are in the vocabulary (see :class:`TokenEmbedding`), for callers
    that made it; ``token_type_ids (B, S)`` (default zeros) is read when ``cfg.type_vocab_size > 0``.

    Shape: src ``(B, S)`` -> memory ``(B, S, D)`` and a list of per-layer self-attention weights
    ``(B, H, S, S)`` (empty unless ``need_weights``).
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        _init_embeddings(self, cfg, cfg.source_vocab_size)
        self.layers = nn.ModuleList(EncoderLayer(**_layer_kwargs(cfg)) for _ in range(cfg.num_encoder_layers))
        self.norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if cfg.norm_first else nn.Identity()

    def forward(self, src: torch.Tensor, need_weights: bool = False, check_range: bool = True,
                token_type_ids: Optional[torch.Tensor] = None):
        mask = attention_mask(key_padding=src != self.cfg.pad_id)  # (B, 1, 1, S)
        x, rope = _embed(self, src, "src", check_range, token_type_ids=token_type_ids)
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask, need_weights, rope=rope)
            if need_weights:
                weights.append(w)
        return self.norm(x), weights


class Decoder(nn.Module):
    """Embedding, positions, a stack of :class:`~tfmini.layers.DecoderLayer` and the output projection.

    With ``cross_attention=False`` this is a decoder-only language model's body.

    Args:
        cfg: the model's :class:`TransformerConfig`.
        cross_attention: False leaves out cross-attention (a decoder-only model).

    ``forward(tgt, memory=None, memory_pad=None, cache=None, need_weights=False, check_range=True,
    real=None, last_only=False)``: ``check_range=False`` skips the check that the ids are in the
    vocabulary (see :class:`TokenEmbedding`); the models' ``decode_next`` does, since the tokens come
    from the model. ``real``, bool ``(B, t + T)`` over the ``t`` cached and the ``T`` new positions
    (True = real token), marks padding: padding keys are masked out and each token's position is the
    number of real tokens before it (padding positions get 0), so a left-padded sequence is computed
    as it would be alone. ``last_only=True`` computes the logits of the last position only.

    Shape: tgt ``(B, T)``, memory ``(B, S, D)``, memory_pad bool ``(B, S)`` (True = real token)
    -> logits ``(B, T, V)`` (``(B, 1, V)`` with ``last_only``) and a list of per-layer weight dicts
    (see ``DecoderLayer``).
    """

    def __init__(self, cfg: TransformerConfig, cross_attention: bool = True):
        super().__init__()
        self.cfg = cfg
        _init_embeddings(self, cfg, cfg.vocab_size)
        self.layers = nn.ModuleList(DecoderLayer(**_layer_kwargs(cfg), cross_attention=cross_attention)
                                    for _ in range(cfg.num_decoder_layers))
        self.norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if cfg.norm_first else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.embed.embedding.weight

    def new_cache(self) -> KVCache:
        """An empty KV cache: one dict per layer."""
        return KVCache({} for _ in self.layers)

    def forward(self, tgt: torch.Tensor, memory: Optional[torch.Tensor] = None,
                memory_pad: Optional[torch.Tensor] = None, cache: Optional[List[dict]] = None,
                need_weights: bool = False, check_range: bool = True, real: Optional[torch.Tensor] = None,
                last_only: bool = False):
        offset = _cached_length(cache)
        T = tgt.shape[1]
        S = offset + T  # keys: the cached positions and the new ones
        if real is not None:  # padded sequences: positions count real tokens, padding keys are masked
            if real.shape != (tgt.shape[0], S) or real.dtype != torch.bool:
                raise ValueError(f"real: expected a bool mask of shape {(tgt.shape[0], S)} (the {offset} cached and "
                                 f"{T} new positions), got {real.dtype} of shape {tuple(real.shape)}")
            if S > self.cfg.max_len:
                raise ValueError(f"tgt: expected positions offset + T <= max_len={self.cfg.max_len}, "
                                 f"got offset={offset}, T={T}")
            x, rope = _embed(self, tgt, "tgt", check_range, positions=_positions(real, T))
            self_mask = real[:, None, None, :]  # (B, 1, 1, S)
            if T > 1:
                self_mask = self_mask & causal_mask(T, S, device=tgt.device)  # (B, 1, T, S)
            is_causal = False
        else:
            x, rope = _embed(self, tgt, "tgt", check_range, offset)
            self_mask, is_causal = None, True
            if T > 1 and S != T and not need_weights:  # new positions after cached ones: one mask for all layers
                self_mask, is_causal = causal_mask(T, S, device=tgt.device), False
        memory_mask = attention_mask(key_padding=memory_pad) if memory_pad is not None else None
        weights = []
        for i, layer in enumerate(self.layers):
            x, w = layer(x, memory, self_mask=self_mask, memory_mask=memory_mask,
                         cache=cache[i] if cache is not None else None,
                         need_weights=need_weights, is_causal=is_causal, rope=rope)
            if need_weights:
                weights.append(w)
        if last_only:
            x = x[:, -1:]  # (B, 1, D): only the next token's logits are wanted
        return self.lm_head(self.norm(x)), weights


class Transformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. (2017).

    ``forward(src, tgt_in)`` runs the decoder with teacher forcing: ``tgt_in`` is the target shifted
    right (starting with BOS) and the logits predict the next token at every position.

    Args:
        cfg: the model's :class:`TransformerConfig`.

    Shape: src ``(B, S)``, tgt ``(B, T)`` -> logits ``(B, T, V)``; with ``need_weights=True`` also a
    dict ``{"encoder": [(B, H, S, S)] * L, "decoder": [(B, H, T, T)] * L, "cross": [(B, H, T, S)] * L}``.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg, cross_attention=True)

    def encode(self, src: torch.Tensor):
        """src ``(B, S)`` -> (memory ``(B, S, D)``, memory_pad ``(B, S)``)."""
        memory, _ = self.encoder(src)
        return memory, src != self.cfg.pad_id

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, need_weights: bool = False):
        _check_ids(src, self.cfg, self.cfg.source_vocab_size, "src")
        _check_ids(tgt, self.cfg, self.cfg.vocab_size, "tgt")
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"tgt: expected batch size {src.shape[0]} as in src, got {tgt.shape[0]} "
                             f"(src {tuple(src.shape)}, tgt {tuple(tgt.shape)})")
        memory, enc_w = self.encoder(src, need_weights, check_range=False)  # ids checked above, once
        logits, dec_w = self.decoder(tgt, memory, src != self.cfg.pad_id, need_weights=need_weights, check_range=False)
        if not need_weights:
            return logits
        return logits, {"encoder": enc_w, "decoder": [w["self"] for w in dec_w], "cross": [w["cross"] for w in dec_w]}

    def start_decoding(self, src: torch.Tensor) -> dict:
        """Encode ``src (B, S)`` once: the state holds its memory, its padding mask and an empty KV
        cache per decoder layer, for :meth:`decode_next`."""
        _check_ids(src, self.cfg, self.cfg.source_vocab_size, "src")
        memory, _ = self.encoder(src, check_range=False)  # ids checked above, once
        return {"memory": memory, "memory_pad": src != self.cfg.pad_id, "cache": self.decoder.new_cache()}

    def decode_next(self, ys: torch.Tensor, state: dict, use_cache: bool = True) -> torch.Tensor:
        """Logits ``(B, V)`` for the token after the prefix ``ys (B, t)``.

        Called once per generated token, it checks the shape and dtype of ``ys`` but not that its ids
        are in the vocabulary (they are BOS and the model's own predictions): no GPU synchronisation."""
        if use_cache:
            cache = state["cache"]
            logits, _ = self.decoder(ys[:, _cached_length(cache):], state["memory"], state["memory_pad"], cache=cache,
                                     check_range=False, last_only=True)
        else:
            logits, _ = self.decoder(ys, state["memory"], state["memory_pad"], check_range=False)
        return logits[:, -1]


class DecoderOnlyLM(nn.Module):
    """A decoder-only (GPT-style) language model: the Transformer's decoder without cross-attention.

    Args:
        cfg: the model's :class:`TransformerConfig`.

    ``forward(ids, need_weights=False, attention_mask=None)``: ``attention_mask``, bool ``(B, T)`` (True =
    real token), marks padding, e.g. the left padding of prompts of different lengths: padding keys
    are masked out and positions count only real tokens (padding positions get 0), as Hugging Face's
    ``generate`` numbers them, so each sequence's logits are those it has alone. The logits at padding
    positions mean nothing.

    Shape: ids ``(B, T)`` -> logits ``(B, T, V)`` predicting token ``t + 1`` at position ``t``;
    with ``need_weights=True`` also a list of per-layer self-attention weights ``(B, H, T, T)``.
    """

    decoder_only = True

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.decoder = Decoder(cfg, cross_attention=False)

    def forward(self, ids: torch.Tensor, need_weights: bool = False, attention_mask: Optional[torch.Tensor] = None):
        _check_ids(ids, self.cfg, self.cfg.vocab_size, "ids")
        real = None if attention_mask is None else _check_attention_mask(attention_mask, ids)
        logits, w = self.decoder(ids, need_weights=need_weights, check_range=False, real=real)  # ids checked above
        return (logits, [x["self"] for x in w]) if need_weights else logits

    def start_decoding(self, prompt: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None) -> dict:
        """A fresh decoding state ``{"cache": ...}`` with one empty KV cache per layer.

        A ``prompt (B, t)``, if given, is only checked (dtype, shape, ids in the vocabulary); the
        decoder reads it through :meth:`decode_next`. An ``attention_mask``, bool ``(B, t)`` (True = real
        token), marks the prompt's padding (see the class's description); it is kept in the state as ``"real"``
        and every later token counts as real.
        """
        if prompt is not None:
            _check_ids(prompt, self.cfg, self.cfg.vocab_size, "prompt")
        state = {"cache": self.decoder.new_cache()}
        if attention_mask is not None:
            if prompt is None:
                raise ValueError("prompt: expected the prompt (B, t) that attention_mask describes, got None")
            state["real"] = _check_attention_mask(attention_mask, prompt)
        return state

    def decode_next(self, ys: torch.Tensor, state: dict, use_cache: bool = True) -> torch.Tensor:
        """Logits ``(B, V)`` for the token after ``ys (B, t)``.

        Like :meth:`Transformer.decode_next`, it does not check that the ids of ``ys`` are in the
        vocabulary (the prompt was checked by :meth:`start_decoding`, the rest are the model's own).
        With the cache only the last position's logits are computed."""
        real = state.get("real")
        if real is not None and real.shape[1] < ys.shape[1]:  # tokens after the prompt are real
            real = torch.cat([real, real.new_ones(real.shape[0], ys.shape[1] - real.shape[1])], dim=1)
            state["real"] = real
        if use_cache:
            cache = state["cache"]
            logits, _ = self.decoder(ys[:, _cached_length(cache):], cache=cache, check_range=False, real=real,
                                     last_only=True)
        else:
            logits, _ = self.decoder(ys, check_range=False, real=real)
        return logits[:, -1]


class EncoderOnlyLM(nn.Module):
    r"""An encoder-only (BERT-style) masked language model: the Transformer's encoder and an output projection.

    There is no causal mask: every position attends to every non-padding position on both sides.
    Trained with :func:`tfmini.pretraining.masked_lm_loss`, it predicts the tokens hidden in its
    input, :math:`p(x_t \mid \tilde x_1, \dots, \tilde x_T)` at every position; its final hidden
    states (:meth:`hidden_states`) are contextual vectors of the tokens. With ``cfg.tie_weights`` the
    projection is the embedding matrix, :math:`\text{logits} = Z E^\top`. BERT puts a dense layer, its
    activation and a LayerNorm before it and adds a bias: ``cfg.mlm_transform=True``. Uses
    ``vocab_size`` and ``num_encoder_layers`` of the config; ``token_type_ids (B, T)`` (BERT's
    segments, default zeros) is read when ``cfg.type_vocab_size > 0``.

    Args:
        cfg: the model's :class:`TransformerConfig`.

    Shape: ids ``(B, T)`` -> logits ``(B, T, V)``; with ``need_weights=True`` also a list of per-layer
    self-attention weights ``(B, H, T, T)``.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        if cfg.src_vocab_size not in (None, cfg.vocab_size):
            raise ValueError(f"src_vocab_size: expected None or vocab_size={cfg.vocab_size} for an encoder-only "
                             f"model (it has one vocabulary), got {cfg.src_vocab_size}")
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        if cfg.mlm_transform:  # BERT's head: dense, activation, norm, then the projection with a bias
            act = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "relu": nn.ReLU()}.get(cfg.activation)
            if act is None:
                raise ValueError(f"activation: expected 'relu', 'gelu' or 'gelu_tanh' with mlm_transform, got {cfg.activation!r}")
            self.transform = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model), act,
                                           make_norm(cfg.norm, cfg.d_model, cfg.norm_eps))
        else:
            self.transform = None
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.mlm_transform)
        if cfg.mlm_transform:
            nn.init.zeros_(self.lm_head.bias)
        if cfg.tie_weights:
            self.lm_head.weight = self.encoder.embed.embedding.weight

    def hidden_states(self, ids: torch.Tensor, need_weights: bool = False,
                      token_type_ids: Optional[torch.Tensor] = None):
        """The encoder's output, one contextual vector per token: ids ``(B, T)`` -> ``(B, T, D)``
        (and the per-layer weights with ``need_weights=True``)."""
        _check_ids(ids, self.cfg, self.cfg.vocab_size, "ids")
        if token_type_ids is not None and self.cfg.type_vocab_size:
            check_token_ids(token_type_ids, self.cfg.type_vocab_size, "token_type_ids")
        z, w = self.encoder(ids, need_weights, check_range=False, token_type_ids=token_type_ids)  # (B, T, D)
        return (z, w) if need_weights else z

    def forward(self, ids: torch.Tensor, need_weights: bool = False, token_type_ids: Optional[torch.Tensor] = None):
        if need_weights:
            z, w = self.hidden_states(ids, need_weights=True, token_type_ids=token_type_ids)
        else:  # the fused attention kernel: no weights are materialised
            z, w = self.hidden_states(ids, token_type_ids=token_type_ids), None
        if self.transform is not None:
            z = self.transform(z)
        logits = self.lm_head(z)  # (B, T, V)
        return (logits, w) if need_weights else logits


class EncoderOnlyModel(nn.Module):
    """An encoder without an output head: one contextual vector per token (Hugging Face's ``BertModel``,
    the body of sentence encoders such as all-MiniLM-L6-v2; :func:`tfmini.huggingface.from_huggingface`).

    The keys a token may attend to are the real tokens of ``attention_mask`` (True = real token, the
    tokenizer's mask as a bool tensor) or, without one, those with ``ids != cfg.pad_id``, as in
    :class:`Encoder`. Padding positions get vectors too (they attend to the real tokens); they mean
    nothing. Uses ``vocab_size`` and ``num_encoder_layers`` of the config; ``token_type_ids (B, T)``
    (default zeros) is read when ``cfg.type_vocab_size > 0``.

    Args:
        cfg: the model's :class:`TransformerConfig`.

    ``forward(ids, attention_mask=None, token_type_ids=None, need_weights=False)``.

    Shape: ids ``(B, T)``, attention_mask bool ``(B, T)`` -> hidden states ``(B, T, D)``; with
    ``need_weights=True`` also a list of per-layer self-attention weights ``(B, H, T, T)``.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        if cfg.src_vocab_size not in (None, cfg.vocab_size):
            raise ValueError(f"src_vocab_size: expected None or vocab_size={cfg.vocab_size} for an encoder-only "
                             f"model (it has one vocabulary), got {cfg.src_vocab_size}")
        self.cfg = cfg
        self.encoder = Encoder(cfg)

    def forward(self, ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None, need_weights: bool = False):
        _check_ids(ids, self.cfg, self.cfg.vocab_size, "ids")
        if attention_mask is None:
            real = ids != self.cfg.pad_id
        elif (not isinstance(attention_mask, torch.Tensor) or attention_mask.dtype != torch.bool
              or attention_mask.shape != ids.shape):
            got = (f"{attention_mask.dtype} of shape {tuple(attention_mask.shape)}"
                   if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__)
            raise ValueError(f"attention_mask: expected a bool tensor of shape {tuple(ids.shape)} as ids (True = real "
                             f"token; a tokenizer's 0/1 mask becomes one with .bool()), got {got}")
        else:
            real = attention_mask
        if token_type_ids is not None and self.cfg.type_vocab_size:
            check_token_ids(token_type_ids, self.cfg.type_vocab_size, "token_type_ids")
        x, rope = _embed(self.encoder, ids, "ids", False, token_type_ids=token_type_ids)  # ids checked above
        mask = real[:, None, None, :]  # (B, 1, 1, T): True = may attend
        weights = []
        for layer in self.encoder.layers:
            x, w = layer(x, mask, need_weights, rope=rope)
            if need_weights:
                weights.append(w)
        x = self.encoder.norm(x)  # (B, T, D)
        return (x, weights) if need_weights else x


__all__ += ["EncoderOnlyModel"]
