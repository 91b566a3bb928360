"""Hugging Face models as tfmini models: GPT-2, BERT and Llama, with the same logits.

:func:`from_huggingface` reads a ``transformers`` model's config, builds the tfmini model with the
options that family needs (:class:`~tfmini.model.TransformerConfig`) and copies every weight. Nothing
here imports ``transformers``: the model is read through its config and its ``state_dict``, so
``import tfmini`` never needs it (install it with ``pip install "tfmini[hf]"``).

What each family needs from tfmini:

- GPT-2: pre-LN, learned positions, GELU's tanh approximation, no ``sqrt(d)`` embedding scale, a
  tied head; its ``Conv1D`` layers store weights as ``(in, out)``, the transpose of ``nn.Linear``'s,
  and its query, key and value projections as one ``c_attn``.
- BERT: post-LN with a LayerNorm on the embeddings, token types, eps 1e-12, and the masked-LM head
  (dense, GELU, LayerNorm, then the tied projection with a bias).
- Llama: pre-RMSNorm, rotary positions (half-split layout), SwiGLU, grouped-query attention, no
  biases, an untied head (unless the config ties it).

Shapes: B batch, T length, V vocabulary.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Tuple

import torch
from torch import nn

from .model import DecoderOnlyLM, EncoderOnlyLM, TransformerConfig

__all__ = ["from_huggingface", "SUPPORTED"]

SUPPORTED = ("GPT2LMHeadModel", "BertForMaskedLM", "LlamaForCausalLM")

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
    pad = getattr(config, "pad_token_id", None)
    return pad if isinstance(pad, int) and 0 <= pad < vocab_size else 0


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
    model = DecoderOnlyLM(cfg)
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
    cfg = TransformerConfig(
        vocab_size=c.vocab_size, d_model=c.hidden_size, num_heads=c.num_attention_heads,
        num_encoder_layers=c.num_hidden_layers, d_ff=c.intermediate_size, dropout=0.0,
        max_len=c.max_position_embeddings, norm_first=False, positional="learned", tie_weights=_tied(hf_model),
        activation=_ACT[c.hidden_act], norm_eps=c.layer_norm_eps, embed_scale=False, embed_norm=True,
        type_vocab_size=c.type_vocab_size, mlm_transform=True, pad_id=_pad_id(c, c.vocab_size))
    model = EncoderOnlyLM(cfg)
    e = "bert.embeddings."

    def same(mine, theirs):
        return [(f"{mine}.{p}", lambda s, k=f"{theirs}.{p}": s[k]) for p in ("weight", "bias")]

    copies = [("encoder.embed.embedding.weight", lambda s: s[e + "word_embeddings.weight"]),
              ("encoder.pos.embedding.weight", lambda s: s[e + "position_embeddings.weight"]),
              ("encoder.token_type.weight", lambda s: s[e + "token_type_embeddings.weight"])]
    copies += same("encoder.embed_norm", e + "LayerNorm")
    for i in range(c.num_hidden_layers):
        h, ours = f"bert.encoder.layer.{i}.", f"encoder.layers.{i}."
        for mine, theirs in (("self_attn.q_proj", "attention.self.query"), ("self_attn.k_proj", "attention.self.key"),
                             ("self_attn.v_proj", "attention.self.value"), ("self_attn.out_proj", "attention.output.dense"),
                             ("norm1", "attention.output.LayerNorm"), ("ff.linear1", "intermediate.dense"),
                             ("ff.linear2", "output.dense"), ("norm2", "output.LayerNorm")):
            copies += same(ours + mine, h + theirs)
    copies += same("transform.0", "cls.predictions.transform.dense")
    copies += same("transform.2", "cls.predictions.transform.LayerNorm")
    copies.append(("lm_head.bias", lambda s: s["cls.predictions.decoder.bias"] if "cls.predictions.decoder.bias" in s
                   else s["cls.predictions.bias"]))
    if not cfg.tie_weights:
        copies.append(("lm_head.weight", lambda s: s["cls.predictions.decoder.weight"]))
    return model, copies


def _llama(hf_model):
    c = hf_model.config
    rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise _unsupported(c, "rope_parameters['rope_type']", "default", rope_type)
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
    model = DecoderOnlyLM(cfg)
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


_BUILDERS = {"GPT2LMHeadModel": _gpt2, "BertForMaskedLM": _bert, "LlamaForCausalLM": _llama}


@torch.no_grad()
def from_huggingface(hf_model) -> nn.Module:
    """A tfmini model with the weights of a Hugging Face GPT-2, BERT or Llama model, in eval mode.

    The tfmini model's ``model(input_ids)`` gives the Hugging Face model's logits (to float rounding)
    for the same ids; for BERT, with ``attention_mask = input_ids != pad_token_id`` on the Hugging Face
    side, since tfmini masks padding keys itself (with no padding in the ids the two agree without a
    mask). Every parameter of the tfmini model is copied, none is left at its initial value; the
    copies are new tensors on the Hugging Face model's device and in its dtype.

    Args:
        hf_model: a ``transformers`` ``GPT2LMHeadModel``, ``BertForMaskedLM`` or ``LlamaForCausalLM``
            (any config of those families, except the variants that raise ``ValueError``).

    Returns:
        a :class:`~tfmini.model.DecoderOnlyLM` (GPT-2, Llama) or :class:`~tfmini.model.EncoderOnlyLM`
        (BERT) in eval mode.

    Shape:
        the returned model maps input ids ``(B, T)`` to logits ``(B, T, V)``.
    """
    name = type(hf_model).__name__
    if name not in _BUILDERS or not isinstance(hf_model, nn.Module):
        raise ValueError(f"hf_model: expected a transformers model of class {' / '.join(SUPPORTED)}, "
                         f"got {name}")
    model, copies = _BUILDERS[name](hf_model)
    theirs = hf_model.state_dict()
    ours = model.state_dict()
    copied = set()
    for key, get in copies:
        value = get(theirs)
        if ours[key].shape != value.shape:
            raise ValueError(f"hf_model: {key} expected shape {tuple(ours[key].shape)}, got {tuple(value.shape)}")
        ours[key] = value.detach().clone().contiguous()
        copied.add(key)
    # A tied head appears in the state dict under its own name too: it must get the embedding's copy.
    shared = set()
    if model.cfg.tie_weights:
        stack = "decoder" if isinstance(model, DecoderOnlyLM) else "encoder"
        head = "decoder.lm_head.weight" if stack == "decoder" else "lm_head.weight"
        ours[head] = ours[f"{stack}.embed.embedding.weight"]
        shared.add(head)
    missing = set(ours) - copied - shared
    if missing:  # pragma: no cover - a gap in the mapping above, caught by the tests
        raise RuntimeError(f"from_huggingface: no weight copied into {sorted(missing)}")
    model.load_state_dict(ours)
    param = next(hf_model.parameters())
    return model.to(device=param.device, dtype=param.dtype).eval()
