"""tfmini.rnn: the hand-written LSTM cell against ``nn.LSTMCell``, and the two RNN encoder-decoders."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from tfmini import AttentionSeq2SeqRNN, LSTMCell, Seq2SeqRNN, reverse_padded

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-10, atol=1e-12)}
V_SRC, V_TGT = 9, 7
RNN_MODELS = [Seq2SeqRNN, AttentionSeq2SeqRNN]


# --------------------------------------------------------------------------------------------- LSTM cell

def test_lstm_cell_has_nn_parameter_names_and_shapes():
    ours, ref = LSTMCell(5, 7), nn.LSTMCell(5, 7)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in ref.state_dict().items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B, E, Hd, steps", [(1, 3, 4, 1), (4, 5, 7, 6), (2, 8, 3, 4)])
@pytest.mark.parametrize("initial_state", [False, True])
def test_lstm_cell_matches_nn_over_several_steps_with_gradients(B, E, Hd, steps, dtype, initial_state):
    ref = nn.LSTMCell(E, Hd, dtype=dtype)
    ours = LSTMCell(E, Hd).to(dtype)
    ours.load_state_dict(ref.state_dict())
    xs = torch.randn(steps, B, E, dtype=dtype, requires_grad=True)
    xs_ref = xs.detach().clone().requires_grad_(True)
    if initial_state:
        h0, c0 = torch.randn(B, Hd, dtype=dtype), torch.randn(B, Hd, dtype=dtype)
        state, state_ref = (h0, c0), (h0.clone(), c0.clone())
    else:
        state = state_ref = None
    loss = loss_ref = 0
    for t in range(steps):
        state = ours(xs[t], state)
        state_ref = ref(xs_ref[t], state_ref)
        assert_close(state[0], state_ref[0], **TOL[dtype])
        assert_close(state[1], state_ref[1], **TOL[dtype])
        loss = loss + (state[0] * (t + 1)).sum() + state[1].pow(2).sum()
        loss_ref = loss_ref + (state_ref[0] * (t + 1)).sum() + state_ref[1].pow(2).sum()
    loss.backward()
    loss_ref.backward()
    assert_close(xs.grad, xs_ref.grad, **TOL[dtype])
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        assert_close(getattr(ours, name).grad, getattr(ref, name).grad, **TOL[dtype])


def test_lstm_cell_gate_order_is_i_f_g_o():
    """With only the forget gate's bias very negative, the cell forgets its state."""
    cell = LSTMCell(2, 3)
    with torch.no_grad():
        for p in cell.parameters():
            p.zero_()
        cell.bias_ih[3:6] = -100.0  # f
        cell.bias_ih[0:3] = -100.0  # i: nothing written
    h, c = cell(torch.zeros(1, 2), (torch.ones(1, 3), torch.ones(1, 3)))
    assert_close(c, torch.zeros(1, 3), rtol=0, atol=1e-30)


def test_lstm_cell_gradcheck():
    cell = LSTMCell(3, 4).double()
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    h = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    c = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, h, c: cell(x, (h, c)), (x, h, c))


@pytest.mark.parametrize("shape", [(2, 4), (2, 3, 3), (3,)])
def test_lstm_cell_rejects_bad_input(shape):
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 3\), got " + r"\(" + ", ".join(map(str, shape))):
        LSTMCell(3, 4)(torch.randn(shape))


# --------------------------------------------------------------------------------------------- helpers

def test_reverse_padded():
    ids = torch.tensor([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8], [9, 0, 0, 0, 0]])
    assert reverse_padded(ids, 0).tolist() == [[3, 2, 1, 0, 0], [8, 7, 6, 5, 4], [9, 0, 0, 0, 0]]
    assert torch.equal(reverse_padded(reverse_padded(ids, 0), 0), ids)


def make_batch(B=3, S=6, T=5):
    lengths = [S, 3, 1][:B]
    src = torch.zeros(B, S, dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, :n] = torch.randint(1, V_SRC, (n,))
    tgt = torch.randint(1, V_TGT, (B, T))
    return src, tgt


def make_model(cls, **kw):
    return cls(V_SRC, V_TGT, d_emb=8, d_hidden=12, **kw).eval()


# --------------------------------------------------------------------------------------------- models

@pytest.mark.parametrize("cls", RNN_MODELS)
def test_rnn_model_shapes(cls):
    model = make_model(cls)
    src, tgt = make_batch()
    logits = model(src, tgt)
    assert logits.shape == (3, 5, V_TGT)


def test_attention_rnn_weights():
    model = make_model(AttentionSeq2SeqRNN)
    src, tgt = make_batch()
    logits, w = model(src, tgt, need_weights=True)
    assert_close(logits, model(src, tgt), rtol=0, atol=0)
    assert w.shape == (3, 5, 6)
    assert_close(w.sum(-1), torch.ones(3, 5), rtol=1e-5, atol=1e-6)
    assert (w[src[:, None, :].expand_as(w) == 0] == 0).all()


def test_plain_rnn_has_no_weights():
    model = make_model(Seq2SeqRNN)
    src, tgt = make_batch()
    logits, w = model(src, tgt, need_weights=True)
    assert w is None and logits.shape == (3, 5, V_TGT)


@pytest.mark.parametrize("cls, kw", [(Seq2SeqRNN, {}), (Seq2SeqRNN, {"reverse_source": True}),
                                     (AttentionSeq2SeqRNN, {}), (AttentionSeq2SeqRNN, {"bidirectional": True})])
def test_extra_source_padding_changes_nothing(cls, kw):
    model = make_model(cls, **kw)
    src, tgt = make_batch()
    padded = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        assert_close(model(padded, tgt), model(src, tgt), rtol=1e-5, atol=1e-6)
        # and each example alone gives the same as in the batch
        for b in range(3):
            n = int((src[b] != 0).sum())
            assert_close(model(src[b:b + 1, :n], tgt[b:b + 1]), model(src, tgt)[b:b + 1], rtol=1e-5, atol=1e-6)


def test_bidirectional_encoder_is_bahdanaus():
    """Annotations [forward h_j; backward h_j] from two LSTMs run over each unpadded source, the decoder's
    first state tanh(W_s backward h_1) with a zero cell, and every step as the unidirectional model's."""
    torch.manual_seed(0)
    model = make_model(AttentionSeq2SeqRNN, bidirectional=True)
    src, tgt = make_batch()
    fwd, bwd = nn.LSTM(8, 12, batch_first=True), nn.LSTM(8, 12, batch_first=True)
    enc = model.encoder
    fwd.load_state_dict({k + "_l0": getattr(enc, k + "_l0") for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")})
    bwd.load_state_dict({k + "_l0": getattr(enc, k + "_l0_reverse") for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")})
    with torch.no_grad():
        state = model.start_decoding(src)
        for b in range(src.shape[0]):
            n = int((src[b] != 0).sum())
            x = model.src_embed(src[b:b + 1, :n])                               # (1, n, E)
            out_f, _ = fwd(x)
            out_b, (h_b, _) = bwd(x.flip(1))
            annotations = torch.cat([out_f, out_b.flip(1)], dim=-1)[0]           # (n, 2Hd)
            assert_close(state["features"][b, :n], model.features(annotations), rtol=1e-5, atol=1e-6)
            assert_close(state["h"][b], torch.tanh(model.init_state(h_b[0, 0])), rtol=1e-5, atol=1e-6)
        assert (state["c"] == 0).all()
    assert model.features.in_features == 24 and make_model(AttentionSeq2SeqRNN).init_state is None


def test_reverse_source_is_feeding_the_reversed_source():
    fwd = make_model(Seq2SeqRNN)
    rev = make_model(Seq2SeqRNN, reverse_source=True)
    rev.load_state_dict(fwd.state_dict())
    src, tgt = make_batch()
    with torch.no_grad():
        assert_close(rev(src, tgt), fwd(reverse_padded(src, 0), tgt), rtol=0, atol=0)
        assert not torch.allclose(rev(src, tgt), fwd(src, tgt))


@pytest.mark.parametrize("cls, kw", [(Seq2SeqRNN, {}), (AttentionSeq2SeqRNN, {}),
                                     (AttentionSeq2SeqRNN, {"bidirectional": True})])
def test_step_by_step_decoding_equals_teacher_forcing(cls, kw):
    model = make_model(cls, **kw)
    src, tgt = make_batch()
    with torch.no_grad():
        full = model(src, tgt)
        state = model.start_decoding(src)
        for t in range(tgt.shape[1]):
            assert_close(model.decode_next(tgt[:, :t + 1], state), full[:, t], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", RNN_MODELS)
def test_rnn_model_trains(cls):
    model = make_model(cls).train()
    src, tgt = make_batch()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = nn.functional.cross_entropy(model(src, tgt[:, :-1]).reshape(-1, V_TGT), tgt[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


# --------------------------------------------------------------------------------------------- save / load

@pytest.mark.parametrize("cls", RNN_MODELS)
def test_rnn_state_dict_round_trip(cls, tmp_path):
    model = make_model(cls)
    src, tgt = make_batch()
    path = tmp_path / "rnn.pt"
    torch.save(model.state_dict(), path)
    torch.manual_seed(123)
    fresh = make_model(cls)
    with torch.no_grad():
        assert not torch.allclose(fresh(src, tgt), model(src, tgt))
    fresh.load_state_dict(torch.load(path, weights_only=True))
    with torch.no_grad():
        assert torch.equal(fresh(src, tgt), model(src, tgt))


# --------------------------------------------------------------------------------------------- validation

@pytest.mark.parametrize("cls", RNN_MODELS)
def test_rnn_rejects_batch_size_mismatch(cls):
    model = make_model(cls)
    with pytest.raises(ValueError, match=r"tgt: expected batch size 3 as in src, got 2"):
        model(torch.randint(1, V_SRC, (3, 4)), torch.randint(1, V_TGT, (2, 5)))


@pytest.mark.parametrize("cls", RNN_MODELS)
@pytest.mark.parametrize("which, bad_value", [("src", -1), ("src", V_SRC), ("tgt", -2), ("tgt", V_TGT)])
def test_rnn_rejects_ids_outside_the_vocabulary(cls, which, bad_value):
    model = make_model(cls)
    src, tgt = make_batch()
    (src if which == "src" else tgt)[0, 0] = bad_value
    vocab = V_SRC if which == "src" else V_TGT
    got = rf"\[{bad_value}, \d+\]" if bad_value < 0 else rf"\[\d+, {bad_value}\]"
    with pytest.raises(ValueError, match=rf"{which}: expected ids in \[0, {vocab - 1}\] \(vocab_size={vocab}\), got values in {got}"):
        model(src, tgt)


@pytest.mark.parametrize("cls", RNN_MODELS)
@pytest.mark.parametrize("src_shape, tgt_shape, which", [((0, 4), (0, 3), "src"), ((2, 0), (2, 3), "src"),
                                                          ((2, 4), (2, 0), "tgt")])
def test_rnn_rejects_empty_inputs(cls, src_shape, tgt_shape, which):
    model = make_model(cls)
    bad = src_shape if which == "src" else tgt_shape
    with pytest.raises(ValueError, match=rf"{which}: expected a non-empty batch and sequence.*\({bad[0]}, {bad[1]}\)"):
        model(torch.ones(src_shape, dtype=torch.long), torch.ones(tgt_shape, dtype=torch.long))


@pytest.mark.parametrize("cls", RNN_MODELS)
def test_rnn_rejects_all_padding_source(cls):
    model = make_model(cls)
    src = torch.tensor([[1, 2, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match=r"src: expected every sequence to have at least one non-pad token, got lengths \[2, 0\]"):
        model(src, torch.ones(2, 3, dtype=torch.long))


@pytest.mark.parametrize("cls", RNN_MODELS)
def test_rnn_rejects_float_ids(cls):
    with pytest.raises(ValueError, match=r"src: expected an integer dtype, got torch\.float32"):
        make_model(cls)(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long))
