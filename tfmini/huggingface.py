"""Hugging Face models as tfmini models: GPT-2, BERT and Llama, with the same logits.

:func:`from_huggingface` reads a ``transformers`` model's config, builds the tfmini model with the
options that family needs (:class:`~tfmini.model.TransformerConfig`) and copies every weight. Nothing
here imports ``transformers``: the model is read through its config and its ``state_dict``, so
``import tfmini`` never needs it (install it with ``pip install "tfmini[hf]"``). The tfmini model is
first built on PyTorch's ``meta`` device (shapes, no memory), then given the copied weights with
``load_state_dict(..., assign=True)``: converting holds one copy of the weights beside the Hugging
Face model's own, not three.

What each family needs from tfmini:

- GPT-2: pre-LN, learned positions, GELU's tanh approximation, no ``sqrt(d)`` embedding scale, a
  tied head; its ``Conv1D`` layers store weights as ``(in, out)``, the transpose of ``nn.Linear``'s,
  and its query, key and value projections as one ``c_attn``.
- BERT: post-LN with a LayerNorm on the embeddings, token types, eps 1e-12, and the masked-LM head
  (dense, GELU, LayerNorm, then the tied projection with a bias). ``BertModel``, the encoder without a
  head (sentence encoders such as all-MiniLM-L6-v2), becomes an :class:`~tfmini.model.EncoderOnlyModel`
  that returns the last hidden states; its pooler (a dense layer on the first token) is left out.
- Llama: pre-RMSNorm, rotary positions (half-split layout; Llama 3.x's frequency scaling,
  ``rope_type: "llama3"``, with :func:`~tfmini.positional.llama3_rope_frequencies`), SwiGLU,
  grouped-query attention, no biases, an untied head (unless the config ties it).

The padding id (``cfg.pad_id``) is the config's ``pad_token_id``; where it has none (GPT-2, Llama), its
``eos_token_id`` (the first, if a list), as Hugging Face's ``generate`` pads with EOS; else 0. A
decoder-only model never masks its padding id (it only writes it after EOS in
:func:`~tfmini.decoding.generate`), so GPT-2's token 0, ``"!"``, is read like any other token; an encoder
masks it as a key where no ``attention_mask`` is given.

Shapes: B batch, T length, D width, V vocabulary.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Tuple

import torch
from torch import nn

from .model import DecoderOnlyLM, EncoderOnlyLM, EncoderOnlyModel, TransformerConfig
from .positional import RotaryEmbedding, SinusoidalPositionalEncoding, rope_cos_sin, sinusoidal_positional_encoding

__all__ = ["from_huggingface", "SUPPORTED"]

SUPPORTED = ("GPT2LMHeadModel", "BertForMaskedLM", "BertModel", "LlamaForCausalLM")

# Hugging Face's activation names (GPT-2 and BERT) -> tfmini's
_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


def _unsupported(config, what: str, expected, got) -> ValueError:
    return ValueError(f"hf_model: expected {what} = {expected!r} for a {type(config).__name__}, got {got!r} "
                      f"(tfmini does not implement this variant)")


def _tied(hf_model) -> bool:
    """Whether the output projection is the input embedding matrix (shared storage)."""
    out, inp = hf_model.get_output_embeddings(), hf_model.get_input_embeddings()
    return out is not None and out.weight.data_ptr() == inp.weight.data_ptr()


def _pad_id(config, vocab_size: int) -> int:
    """``pad_token_id``, else ``eos_token_id`` (the first of a list), else 0 (see the module's text)."""
    for candidate in (getattr(config, "pad_token_id", None), getattr(config, "eos_token_id", None)):
        if isinstance(candidate, (list, tuple)):
            candidate = candidate[0] if candidate else None
        if isinstance(candidate, int) and not isinstance(candidate, bool) and 0 <= candidate < vocab_size:
            return candidate
    return 0


def _on_meta(cls, cfg: TransformerConfig) -> nn.Module:
    """A tfmini model with the shapes of ``cfg`` and no memory: its weights come from the copies."""
    with torch.device("meta"):
        return cls(cfg)


def _gpt2(hf_model) -> Tuple[nn.Module, List[Tuple[str, Callable[[Dict[str, torch.Tensor]], torch.Tensor]]]]:
    c = hf_model.config
    if not getattr(c, "scale_attn_weights", True):
        raise _unsupported(c, "scale_attn_weights", True, c.scale_attn_weights)
    if getattr(c, "scale_attn_by_inverse_layer_idx", False):
        raise _unsupported(c, "scale_attn_by_inverse_layer_idx", False, True)
    if getattr(c, "add_cross_attention", False):
        raise _unsupported(c, "add_cross_attention", False, True)
    if c.activation_function not in _ACT:
        raise _unsupported(c, "activation_function", sorted(_ACT), c.activation_function)
    cfg = TransformerConfig(
        vocab_size=c.vocab_size, d_model=c.n_embd, num_heads=c.n_head, num_decoder_layers=c.n_layer,
        d_ff=c.n_inner or 4 * c.n_embd, dropout=0.0, max_len=c.n_positions, norm_first=True, positional="learned",
        tie_weights=_tied(hf_model), activation=_ACT[c.activation_function], norm_eps=c.layer_norm_epsilon,
        embed_scale=False, pad_id=_pad_id(c, c.vocab_size))
    model = _on_meta(DecoderOnlyLM, cfg)
    D = c.n_embd
    copies = [("decoder.embed.embedding.weight", lambda s: s["transformer.wte.weight"]),
              ("decoder.pos.embedding.weight", lambda s: s["transformer.wpe.weight"]),
              ("decoder.norm.weight", lambda s: s["transformer.ln_f.weight"]),
              ("decoder.norm.bias", lambda s: s["transformer.ln_f.bias"])]
    for i in range(c.n_layer):
        h, ours = f"transformer.h.{i}.", f"decoder.layers.{i}."
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):  # c_attn: (D, 3D), Conv1D stores (in, out)
            sl = slice(j * D, (j + 1) * D)
            copies += [(f"{ours}self_attn.{name}.weight", lambda s, h=h, sl=sl: s[h + "attn.c_attn.weight"][:, sl].t()),
                       (f"{ours}self_attn.{name}.bias", lambda s, h=h, sl=sl: s[h + "attn.c_attn.bias"][sl])]
        pairs = [("self_attn.out_proj", "attn.c_proj"), ("ff.linear1", "mlp.c_fc"), ("ff.linear2", "mlp.c_proj")]
        for mine, theirs in pairs:
            copies += [(f"{ours}{mine}.weight", lambda s, k=h + theirs: s[k + ".weight"].t()),
                       (f"{ours}{mine}.bias", lambda s, k=h + theirs: s[k + ".bias"])]
        for mine, theirs in (("norm1", "ln_1"), ("norm3", "ln_2")):
            copies += [(f"{ours}{mine}.{p}", lambda s, k=f"{h}{theirs}.{p}": s[k]) for p in ("weight", "bias")]
    if not cfg.tie_weights:
        copies.append(("decoder.lm_head.weight", lambda s: s["lm_head.weight"]))
    return model, copies


def _bert(hf_model):
    c = hf_model.config
    if getattr(c, "position_embedding_type", "absolute") not in (None, "absolute"):
        raise _unsupported(c, "position_embedding_type", "absolute", c.position_embedding_type)
    if c.hidden_act not in _ACT:
        raise _unsupported(c, "hidden_act", sorted(_ACT), c.hidden_act)
    if getattr(c, "is_decoder", False) or getattr(c, "add_cross_attention", False):
        raise _unsupported(c, "is_decoder", False, True)
    bare = type(hf_model).__name__ == "BertModel"  # no head: the hidden states
    cfg = TransformerConfig(
        vocab_size=c.vocab_size, d_model=c.hidden_size, num_heads=c.num_attention_heads,
        num_encoder_layers=c.num_hidden_layers, d_ff=c.intermediate_size, dropout=0.0,
        max_len=c.max_position_embeddings, norm_first=False, positional="learned",
        tie_weights=False if bare else _tied(hf_model), activation=_ACT[c.hidden_act], norm_eps=c.layer_norm_eps,
        embed_scale=False, embed_norm=True, type_vocab_size=c.type_vocab_size, mlm_transform=not bare,
        pad_id=_pad_id(c, c.vocab_size))
    model = _on_meta(EncoderOnlyModel if bare else EncoderOnlyLM, cfg)
    prefix = "" if bare else "bert."
    e = prefix + "embeddings."

    def same(mine, theirs):
        return [(f"{mine}.{p}", lambda s, k=f"{theirs}.{p}": s[k]) for p in ("weight", "bias")]

    copies = [("encoder.embed.embedding.weight", lambda s: s[e + "word_embeddings.weight"]),
              ("encoder.pos.embedding.weight", lambda s: s[e + "position_embeddings.weight"]),
              ("encoder.token_type.weight", lambda s: s[e + "token_type_embeddings.weight"])]
    copies += same("encoder.embed_norm", e + "LayerNorm")
    for i in range(c.num_hidden_layers):
        h, ours = f"{prefix}encoder.layer.{i}.", f"encoder.layers.{i}."
        for mine, theirs in (("self_attn.q_proj", "attention.self.query"), ("self_attn.k_proj", "attention.self.key"),
                             ("self_attn.v_proj", "attention.self.value"), ("self_attn.out_proj", "attention.output.dense"),
                             ("norm1", "attention.output.LayerNorm"), ("ff.linear1", "intermediate.dense"),
                             ("ff.linear2", "output.dense"), ("norm2", "output.LayerNorm")):
            copies += same(ours + mine, h + theirs)
    if bare:
        return model, copies
    copies += same("transform.0", "cls.predictions.transform.dense")
    copies += same("transform.2", "cls.predictions.transform.LayerNorm")
    copies.append(("lm_head.bias", lambda s: s["cls.predictions.decoder.bias"] if "cls.predictions.decoder.bias" in s
                   else s["cls.predictions.bias"]))
    if not cfg.tie_weights:
        copies.append(("lm_head.weight", lambda s: s["cls.predictions.decoder.weight"]))
    return model, copies


def _llama(hf_model):
    c = hf_model.config
    rope = dict(getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "llama3"):
        raise _unsupported(c, "rope_parameters['rope_type']", "'default' or 'llama3'", rope_type)
    if rope.get("partial_rotary_factor", getattr(c, "partial_rotary_factor", 1.0)) not in (None, 1, 1.0):
        raise _unsupported(c, "partial_rotary_factor", 1.0, rope.get("partial_rotary_factor", c.partial_rotary_factor))
    if rope_type == "llama3" and "original_max_position_embeddings" not in rope:  # Hugging Face's fallback
        rope["original_max_position_embeddings"] = c.max_position_embeddings
    theta = rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))
    if c.hidden_act != "silu":
        raise _unsupported(c, "hidden_act", "silu", c.hidden_act)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    cfg = TransformerConfig(
        vocab_size=c.vocab_size, d_model=c.hidden_size, num_heads=c.num_attention_heads,
        num_decoder_layers=c.num_hidden_layers, d_ff=c.intermediate_size, dropout=0.0,
        max_len=c.max_position_embeddings, norm_first=True, positional="rope", rope_theta=float(theta),
        tie_weights=_tied(hf_model), activation="swiglu", norm="rmsnorm", norm_eps=c.rms_norm_eps,
        num_kv_heads=c.num_key_value_heads or c.num_attention_heads,
        head_dim=None if head_dim * c.num_attention_heads == c.hidden_size else head_dim,
        attention_bias=bool(getattr(c, "attention_bias", False)), ffn_bias=bool(getattr(c, "mlp_bias", False)),
        embed_scale=False, pad_id=_pad_id(c, c.vocab_size))
    model = _on_meta(DecoderOnlyLM, cfg)
    if rope_type == "llama3":  # the config has no field for it: the decoder's tables are rebuilt with the scaling
        with torch.device("meta"):
            model.decoder.rope = RotaryEmbedding(cfg.head_width, cfg.max_len, cfg.rope_theta, scaling=rope)
    copies = [("decoder.embed.embedding.weight", lambda s: s["model.embed_tokens.weight"]),
              ("decoder.norm.weight", lambda s: s["model.norm.weight"])]
    params = ["weight"] + (["bias"] if cfg.attention_bias else [])
    ffn_params = ["weight"] + (["bias"] if cfg.ffn_bias else [])
    for i in range(c.num_hidden_layers):
        h, ours = f"model.layers.{i}.", f"decoder.layers.{i}."
        for mine, theirs, ps in (("self_attn.q_proj", "self_attn.q_proj", params), ("self_attn.k_proj", "self_attn.k_proj", params),
                                 ("self_attn.v_proj", "self_attn.v_proj", params), ("self_attn.out_proj", "self_attn.o_proj", params),
                                 ("ff.linear_gate", "mlp.gate_proj", ffn_params), ("ff.linear1", "mlp.up_proj", ffn_params),
                                 ("ff.linear2", "mlp.down_proj", ffn_params),
                                 ("norm1", "input_layernorm", ["weight"]), ("norm3", "post_attention_layernorm", ["weight"])):
            copies += [(f"{ours}{mine}.{p}", lambda s, k=f"{h}{theirs}.{p}": s[k]) for p in ps]
    if not cfg.tie_weights:
        copies.append(("decoder.lm_head.weight", lambda s: s["lm_head.weight"]))
    return model, copies


_BUILDERS = {"GPT2LMHeadModel": _gpt2, "BertForMaskedLM": _bert, "BertModel": _bert, "LlamaForCausalLM": _llama}


def _tied_groups(model: nn.Module) -> List[List[Tuple[nn.Module, str]]]:
    """The places (module, attribute) that hold one and the same parameter, for each shared parameter."""
    places: Dict[int, List[Tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                places.setdefault(id(p), []).append((module, name))
    return [group for group in places.values() if len(group) > 1]


def _fill_buffers(model: nn.Module, device: torch.device) -> None:
    """Compute the tables that a model built on the meta device lacks (non-persistent buffers: RoPE's
    ``cos``/``sin``, the sinusoidal ``pe``), in float32 on ``device``."""
    for module in model.modules():
        if not any(b is not None and b.is_meta for b in module._buffers.values()):
            continue
        if isinstance(module, RotaryEmbedding):
            cos, sin = rope_cos_sin(module.max_len, module.head_dim, module.theta, module.scaling)
            module.cos, module.sin = cos.to(device), sin.to(device)
        elif isinstance(module, SinusoidalPositionalEncoding):
            module.pe = sinusoidal_positional_encoding(module.max_len, module.d_model).to(device)
        else:  # pragma: no cover - a new kind of buffer in tfmini, caught by the tests
            raise RuntimeError(f"from_huggingface: no way to compute the buffers of a {type(module).__name__} "
                               f"built on the meta device")


@torch.no_grad()
def from_huggingface(hf_model) -> nn.Module:
    """A tfmini model with the weights of a Hugging Face GPT-2, BERT or Llama model, in eval mode.

    The tfmini model's ``model(input_ids)`` gives the Hugging Face model's logits (to float rounding)
    for the same ids; for ``BertForMaskedLM``, with ``attention_mask = input_ids != pad_token_id`` on
    the Hugging Face side, since tfmini masks padding keys itself (with no padding in the ids the two
    agree without a mask). For ``BertModel``, ``model(input_ids, attention_mask=mask.bool())`` gives
    its ``last_hidden_state`` for ``attention_mask=mask`` (the pooler is not carried over). Every
    parameter of the tfmini model is copied, none is left at its initial value; the copies are new
    tensors on the Hugging Face model's device and in its dtype, independent of the Hugging Face model.

    Memory: the tfmini model is built on the ``meta`` device and each weight is copied once, straight
    into the tensor the model keeps (``load_state_dict(..., assign=True)``), so converting needs about
    one model's size beside the Hugging Face model (tests/test_hf.py measures at most 1.3 times).

    Args:
        hf_model: a ``transformers`` ``GPT2LMHeadModel``, ``BertForMaskedLM``, ``BertModel`` or
            ``LlamaForCausalLM`` (any config of those families, except the variants that raise
            ``ValueError``; Llama's ``rope_type`` may be ``"default"`` or ``"llama3"``).

    Returns:
        a :class:`~tfmini.model.DecoderOnlyLM` (GPT-2, Llama), :class:`~tfmini.model.EncoderOnlyLM`
        (``BertForMaskedLM``) or :class:`~tfmini.model.EncoderOnlyModel` (``BertModel``), in eval mode.

    Shape:
        the returned model maps input ids ``(B, T)`` to logits ``(B, T, V)``; an
        :class:`~tfmini.model.EncoderOnlyModel` to hidden states ``(B, T, D)``.

    Raises:
        ValueError: ``hf_model`` is not one of those classes, or is a variant tfmini does not implement
            (the message names the config field, what tfmini expects and what it got).
    """
    name = type(hf_model).__name__
    if name not in _BUILDERS or not isinstance(hf_model, nn.Module):
        raise ValueError(f"hf_model: expected a transformers model of class {' / '.join(SUPPORTED)}, "
                         f"got {name}")
    model, copies = _BUILDERS[name](hf_model)  # on the meta device: shapes only
    theirs = hf_model.state_dict()  # references to the Hugging Face model's tensors, no copies
    wanted = model.state_dict()
    ours: Dict[str, torch.Tensor] = {}
    for key, get in copies:
        value = get(theirs).detach()
        if wanted[key].shape != value.shape:
            raise ValueError(f"hf_model: {key} expected shape {tuple(wanted[key].shape)}, got {tuple(value.shape)}")
        # one new contiguous tensor per weight (a transposed or sliced view is copied in the same pass)
        ours[key] = torch.empty(value.shape, dtype=value.dtype, device=value.device).copy_(value)
    # A tied head appears in the state dict under its own name too: it gets the embedding's tensor.
    tied = _tied_groups(model)
    if model.cfg.tie_weights and not isinstance(model, EncoderOnlyModel):
        stack = "decoder" if isinstance(model, DecoderOnlyLM) else "encoder"
        head = "decoder.lm_head.weight" if stack == "decoder" else "lm_head.weight"
        ours[head] = ours[f"{stack}.embed.embedding.weight"]
    missing = set(wanted) - set(ours)
    if missing:  # pragma: no cover - a gap in the mapping above, caught by the tests
        raise RuntimeError(f"from_huggingface: no weight copied into {sorted(missing)}")
    model.load_state_dict(ours, assign=True)  # the copies become the parameters: no further copy
    for group in tied:  # assign=True makes one Parameter per name: share them again
        first = getattr(*group[0])
        for module, attr in group[1:]:
            setattr(module, attr, first)
    param = next(hf_model.parameters())
    _fill_buffers(model, param.device)
    return model.to(device=param.device, dtype=param.dtype).eval()
