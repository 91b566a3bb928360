"""Recurrent sequence-to-sequence models: an LSTM cell by hand, the fixed-context encoder-decoder
(Sutskever et al., 2014) and the encoder-decoder with Bahdanau attention (Bahdanau et al., 2015).

Shapes: B batch, S source length, T target length, E embedding width, Hd hidden width, V vocabulary.
Sequences are right-padded with ``pad_id``. Both models share the Transformer's interface:
``forward(src, tgt_in)`` -> logits ``(B, T, V)`` with teacher forcing, and
``start_decoding`` / ``decode_next`` for :mod:`tfmini.decoding` (an RNN's state is its own cache,
so ``use_cache`` changes nothing).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._checks import check_token_ids
from .attention import BahdanauAttention

__all__ = ["LSTMCell", "reverse_padded", "Seq2SeqRNN", "AttentionSeq2SeqRNN"]


class LSTMCell(nn.Module):
    r"""One LSTM step written out (Hochreiter & Schmidhuber, 1997), with ``nn.LSTMCell``'s parameters.

    .. math::
        \mathbf i = \sigma(W_{ii}\mathbf x + W_{hi}\mathbf h + \mathbf b_i), \;
        \mathbf f = \sigma(W_{if}\mathbf x + W_{hf}\mathbf h + \mathbf b_f), \;
        \mathbf g = \tanh(W_{ig}\mathbf x + W_{hg}\mathbf h + \mathbf b_g), \;
        \mathbf o = \sigma(W_{io}\mathbf x + W_{ho}\mathbf h + \mathbf b_o)

    .. math:: \mathbf c' = \mathbf f \odot \mathbf c + \mathbf i \odot \mathbf g, \quad \mathbf h' = \mathbf o \odot \tanh(\mathbf c')

    ``weight_ih (4Hd, E)``, ``weight_hh (4Hd, Hd)`` and the biases stack the gates in the order
    i, f, g, o, exactly like ``nn.LSTMCell``, so its weights can be copied in.

    Args:
        input_size: width ``E`` of the input ``x``.
        hidden_size: width ``Hd`` of the hidden and cell states.

    ``forward(x, state=None)`` returns the new ``(h, c)``; a missing state is all zeros.

    Shape:
        x ``(B, E)``, state ``((B, Hd), (B, Hd))`` -> ``((B, Hd), (B, Hd))``.
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        bound = hidden_size ** -0.5
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size).uniform_(-bound, bound))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size).uniform_(-bound, bound))
        self.bias_ih = nn.Parameter(torch.empty(4 * hidden_size).uniform_(-bound, bound))
        self.bias_hh = nn.Parameter(torch.empty(4 * hidden_size).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, state: Optional[Tuple[torch.Tensor, torch.Tensor]] = None):
        if x.dim() != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"x: expected shape (B, {self.input_size}), got {tuple(x.shape)}")
        if state is None:
            zeros = x.new_zeros(x.shape[0], self.hidden_size)
            state = (zeros, zeros)
        h, c = state
        gates = x @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh  # (B, 4Hd)
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


def reverse_padded(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Reverse each right-padded sequence within its own length (the input-reversal trick of Sutskever et al.).

    Args:
        ids: right-padded token ids ``(B, S)``.
        pad_id: the id of the padding token.

    Returns:
        the ids with each sequence's real tokens in reverse order and the padding left at the end.

    Shape:
        ``(B, S)`` -> ``(B, S)``.
    """
    lengths = (ids != pad_id).sum(dim=1, keepdim=True)  # (B, 1)
    pos = torch.arange(ids.shape[1], device=ids.device)[None, :]  # (1, S)
    src_pos = torch.where(pos < lengths, lengths - 1 - pos, pos)
    return ids.gather(1, src_pos)


class _RNNSeq2SeqBase(nn.Module):
    """Embeddings, a (packed) LSTM encoder, input checks and the decoding interface."""

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_emb: int, d_hidden: int, pad_id: int,
                 bidirectional: bool = False):
        super().__init__()
        self.src_vocab_size, self.tgt_vocab_size, self.pad_id = src_vocab_size, tgt_vocab_size, pad_id
        self.src_embed = nn.Embedding(src_vocab_size, d_emb, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_emb, padding_idx=pad_id)
        self.encoder = nn.LSTM(d_emb, d_hidden, batch_first=True, bidirectional=bidirectional)

    def _encode(self, src: torch.Tensor):
        """src ``(B, S)`` -> outputs ``(B, S, Hd)`` (``(B, S, 2Hd)`` when bidirectional; zeros at padding)
        and the last real state ``(h, c)`` of the forward direction (of the backward one when
        bidirectional: it ends on the first token, having read the whole source)."""
        lengths = (src != self.pad_id).sum(dim=1).cpu()  # (B,) packing needs them on the CPU: one copy, checked there
        if bool((lengths == 0).any()):
            raise ValueError(f"src: expected every sequence to have at least one non-pad token, got lengths {lengths.tolist()}")
        packed = pack_padded_sequence(self.src_embed(src), lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.encoder(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # (B, S, Hd or 2Hd)
        return out, (h[-1], c[-1])  # (B, Hd) each: the forward direction's, or with two the backward one's

    def _check(self, src, tgt=None):
        check_token_ids(src, self.src_vocab_size, "src")
        if tgt is not None:
            check_token_ids(tgt, self.tgt_vocab_size, "tgt")
            if src.shape[0] != tgt.shape[0]:
                raise ValueError(f"tgt: expected batch size {src.shape[0]} as in src, got {tgt.shape[0]}")

    def start_decoding(self, src: torch.Tensor) -> dict:
        """Encode ``src (B, S)`` once and return the decoder's starting state for :meth:`decode_next`:
        the encoder's final ``h`` and ``c``, and with attention also its projected features and keys."""
        self._check(src)
        return self._start(src)

    def decode_next(self, ys: torch.Tensor, state: dict, use_cache: bool = True) -> torch.Tensor:
        """Logits ``(B, V)`` after feeding the newest token ``ys[:, -1]``; updates ``state`` in place."""
        return self._step(ys[:, -1], state)


class Seq2SeqRNN(_RNNSeq2SeqBase):
    """LSTM encoder-decoder with one fixed context vector: the encoder's last state ``(h, c)``
    initialises the decoder, which never sees the source again (eqs. (1)-(3) of the lecture notes).

    With teacher forcing the decoder's inputs are all known, so training runs the decoder LSTM over
    the whole target at once; decoding feeds it one token at a time.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes of source and target.
        d_emb: width of the token embeddings.
        d_hidden: width ``Hd`` of the LSTM states.
        pad_id: the id of the padding token (in both vocabularies).
        reverse_source: feed the source reversed (Sutskever et al., 2014).

    ``forward(src, tgt, need_weights=False)`` returns the logits (and None for the weights when
    ``need_weights``, for the same interface as :class:`AttentionSeq2SeqRNN`).

    Shape:
        src ``(B, S)``, tgt ``(B, T)`` -> logits ``(B, T, V)``.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_emb: int = 64, d_hidden: int = 128,
                 pad_id: int = 0, reverse_source: bool = False):
        super().__init__(src_vocab_size, tgt_vocab_size, d_emb, d_hidden, pad_id)
        self.reverse_source = reverse_source
        self.decoder = nn.LSTM(d_emb, d_hidden, batch_first=True)
        self.out = nn.Linear(d_hidden, tgt_vocab_size)

    def _start(self, src):
        if self.reverse_source:
            src = reverse_padded(src, self.pad_id)
        _, (h, c) = self._encode(src)
        return {"h": h, "c": c}

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, need_weights: bool = False):
        self._check(src, tgt)
        state = self._start(src)
        out, _ = self.decoder(self.tgt_embed(tgt), (state["h"][None], state["c"][None]))  # (B, T, Hd)
        logits = self.out(out)  # (B, T, V)
        return (logits, None) if need_weights else logits

    def _step(self, y_prev, state):
        out, (h, c) = self.decoder(self.tgt_embed(y_prev)[:, None], (state["h"][None], state["c"][None]))
        state["h"], state["c"] = h[0], c[0]
        return self.out(out[:, 0])  # (B, V)


class AttentionSeq2SeqRNN(_RNNSeq2SeqBase):
    r"""LSTM encoder-decoder with Bahdanau attention, eqs. (4)-(8) of the lecture notes.

    Features :math:`\mathbf f_j = \mathbf h^e_j W_f`; at step :math:`i` the previous decoder state
    :math:`\mathbf h^d_{i-1}` scores every feature, the softmax gives :math:`\alpha_i` and the
    context :math:`\mathbf c_i = \sum_j \alpha_{ij} \mathbf f_j` enters the LSTM with the previous
    token :math:`y_{i-1}`. The output layer reads ``[h^d_i; c_i]``. The context depends on the previous
    decoder state, so even with teacher forcing the decoder runs one step at a time.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes of source and target.
        d_emb: width of the token embeddings.
        d_hidden: width ``Hd`` of the LSTM states and of the features.
        d_attn: width of the attention's score MLP (default ``d_hidden``).
        pad_id: the id of the padding token (in both vocabularies).
        bidirectional: encode with a forward and a backward LSTM, as Bahdanau et al. do: the
            annotation of word :math:`j` is :math:`[\overrightarrow{\mathbf h}_j; \overleftarrow{\mathbf h}_j]`
            ``(2Hd)``, mapped to the features by :math:`W_f` ``(Hd, 2Hd)``, and the decoder starts
            from :math:`\mathbf h^d_0 = \tanh(W_s \overleftarrow{\mathbf h}_1)`, :math:`\mathbf c^d_0 = \mathbf 0`
            (their :math:`s_0`). Without it, the decoder starts from the encoder's last state.

    ``forward(src, tgt, need_weights=False)`` returns the logits, and with ``need_weights=True``
    ``(logits, weights)``.

    Shape:
        src ``(B, S)``, tgt ``(B, T)`` -> logits ``(B, T, V)``; with ``need_weights=True`` also
        the attention weights ``(B, T, S)``.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_emb: int = 64, d_hidden: int = 128,
                 d_attn: Optional[int] = None, pad_id: int = 0, bidirectional: bool = False):
        super().__init__(src_vocab_size, tgt_vocab_size, d_emb, d_hidden, pad_id, bidirectional)
        self.bidirectional = bidirectional
        self.decoder_cell = nn.LSTMCell(d_emb + d_hidden, d_hidden)
        self.features = nn.Linear(2 * d_hidden if bidirectional else d_hidden, d_hidden)
        self.init_state = nn.Linear(d_hidden, d_hidden) if bidirectional else None
        self.attention = BahdanauAttention(d_hidden, d_hidden, d_attn or d_hidden)
        self.out = nn.Linear(2 * d_hidden, tgt_vocab_size)

    def _start(self, src):
        enc_out, (h, c) = self._encode(src)  # (B, S, Hd or 2Hd); (B, Hd) each
        if self.bidirectional:
            h, c = torch.tanh(self.init_state(h)), torch.zeros_like(c)  # from the backward LSTM's last state
        features = self.features(enc_out)  # (B, S, Hd)
        return {"h": h, "c": c, "features": features, "mask": src != self.pad_id,
                "keys": self.attention.score.W_k(features)}  # keys projected once, used at every step

    def _advance(self, y_emb, state):
        """One decoder step from the embedded previous token; returns the context and the weights."""
        context, weights = self.attention(state["h"], state["features"], state["mask"], state["keys"])  # (B, Hd), (B, S)
        x = torch.cat([y_emb, context], dim=-1)  # (B, E + Hd)
        state["h"], state["c"] = self.decoder_cell(x, (state["h"], state["c"]))
        return context, weights

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, need_weights: bool = False):
        self._check(src, tgt)
        state = self._start(src)
        emb = self.tgt_embed(tgt)  # (B, T, E)
        hs, contexts, weights = [], [], []
        for i in range(tgt.shape[1]):
            context, w = self._advance(emb[:, i], state)
            hs.append(state["h"])
            contexts.append(context)
            weights.append(w)
        logits = self.out(torch.cat([torch.stack(hs, 1), torch.stack(contexts, 1)], dim=-1))  # (B, T, V)
        return (logits, torch.stack(weights, dim=1)) if need_weights else logits  # weights (B, T, S)

    def _step(self, y_prev, state):
        context, _ = self._advance(self.tgt_embed(y_prev), state)
        return self.out(torch.cat([state["h"], context], dim=-1))  # (B, V)
