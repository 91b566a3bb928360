"""Diagrams of Part I: the RNN encoder-decoder (chapter 1), Bahdanau's decoder step (chapter 2) and
attention as a soft lookup (chapter 3)."""

from __future__ import annotations

from . import shapes
from .canvas import FONT, KINDS, MUTED, Canvas


def rnn_bottleneck() -> Canvas:
    """Chapter 1: encoder LSTM steps, the fixed-size context, decoder LSTM steps."""
    s = shapes.rnn_seq2seq()
    c = Canvas(7.6, 3.1)
    c.title("RNN encoder-decoder: the whole source passes through one state")
    step, cell_w, cell_h, y = 0.62, 0.46, 0.38, 1.55
    enc_x = [0.62 + k * step for k in range(len(s["words"]))]
    for k, (x, word) in enumerate(zip(enc_x, s["words"])):
        c.box(x, y, cell_w, cell_h, "LSTM", kind="rnn", size=7.5)
        c.text(x, 0.72, word, size=8.5, style="italic")
        c.arrow((x, 0.84), (x, y - cell_h / 2))
        if k:
            c.arrow((enc_x[k - 1] + cell_w / 2, y), (x - cell_w / 2, y))
        c.arrow((x, y + cell_h / 2), (x, y + 0.5), color="#aaaaaa", dashed=True)
    c.text((enc_x[0] + enc_x[-1]) / 2, y + 0.64, "encoder outputs, unused by the decoder", size=7.5, color=MUTED)
    c.shape((enc_x[0] + enc_x[-1]) / 2, y + 0.82, s["encoder_out"], color="#999999")
    c.shape((enc_x[0] + enc_x[-1]) / 2, 0.42, s["embedded"], "embedded source")
    c.text(0.2, 2.45, "encoder", size=FONT, weight="bold", ha="left", color=KINDS["rnn"][1])

    mid = enc_x[-1] + 0.78
    c.box(mid, y, 0.62, 0.62, "h, c", kind="tensor", size=9, weight="bold")
    c.arrow((enc_x[-1] + cell_w / 2, y), (mid - 0.31, y))
    c.text(mid, y - 0.5, "context", size=8.5, weight="bold")
    c.shape(mid, y - 0.68, s["h"], "h")
    c.shape(mid, y - 0.84, s["c"], "c")
    c.text(mid, y + 0.56, f"{s['context_numbers']} numbers,\nany source length", size=7.5, color=MUTED)

    dec_in = ["<bos>", *s["digits"]]
    dec_out = [*s["digits"], "<eos>"]
    dec_x = [mid + 0.78 + k * step for k in range(len(dec_in))]
    for k, x in enumerate(dec_x):
        c.box(x, y, cell_w, cell_h, "LSTM", kind="rnn", size=7.5)
        c.text(x, 0.72, dec_in[k], size=8.5, style="italic")
        c.arrow((x, 0.84), (x, y - cell_h / 2))
        c.arrow((x, y + cell_h / 2), (x, y + 0.5))
        c.text(x, y + 0.64, dec_out[k], size=8.5, weight="bold")
        if k:
            c.arrow((dec_x[k - 1] + cell_w / 2, y), (x - cell_w / 2, y))
    c.arrow((mid + 0.31, y), (dec_x[0] - cell_w / 2, y))
    c.text(dec_x[0] - 0.2, 2.45, "decoder", size=FONT, weight="bold", ha="left", color=KINDS["rnn"][1])
    c.shape((dec_x[0] + dec_x[-1]) / 2, y + 0.88, s["logits"], "logits")
    c.shape((dec_x[0] + dec_x[-1]) / 2, 0.42, s["tgt_in"], "target in")
    c.text((dec_x[0] + dec_x[-1]) / 2, 0.22, "each output token is the next step's input", size=7.5, color=MUTED)
    return c


def bahdanau_step() -> Canvas:
    """Chapter 2: one decoder step: scores, softmax weights, context, LSTM update."""
    s = shapes.bahdanau_step()
    c = Canvas(7.6, 3.5)
    c.title("One decoder step with Bahdanau attention")
    n = len(s["scores"])
    xs = [0.75 + 0.72 * j for j in range(n)]
    for j, (x, e, a) in enumerate(zip(xs, s["scores"], s["weights"])):
        c.box(x, 0.55, 0.5, 0.34, f"f{chr(0x2081 + j)}", kind="rnn", size=9)
        c.arrow((x - 0.1, 0.72), (x - 0.1, 1.03))
        c.text(x, 1.14, f"e = {e:g}", size=8, mono=True)
        c.rect(x - 0.16, 1.5, 0.32, 1.2 * a, fill=KINDS["attention"][1], edge="none")
        c.text(x, 1.5 + 1.2 * a + 0.1, f"{a:.2f}", size=8, mono=True)
        c.arrow((x, 1.26), (x, 1.46), color="#888888", width=0.9)
    c.line([xs[0] - 0.3, xs[-1] + 0.3], [1.5, 1.5], color="#888888", width=0.8)
    c.text(xs[0] - 0.42, 1.8, "α", size=11, weight="bold", color=KINDS["attention"][1])
    c.text(xs[0] - 0.42, 1.14, "score", size=7.5, color=MUTED, ha="right")
    c.shape((xs[0] + xs[-1]) / 2, 0.2, s["features"], "features")
    c.text(xs[-1] + 0.3, 1.75, "softmax", size=8, color=MUTED, ha="left")
    c.shape(xs[-1] + 0.3, 1.58, s["alpha"], "", ha="left")

    hx = 4.35
    h_prev = c.box(hx, 0.55, 1.05, 0.38, "hᵈᵢ₋₁", kind="rnn", size=10)
    c.shape(hx, 0.2, s["h_prev"])
    # h_{i-1} scores every f_j: a bus along the score row, with one arrow up into each score e_j. The bus
    # breaks where it crosses the arrows from the features.
    bus, purple, turn = 0.88, KINDS["rnn"][1], xs[-1] + 0.45
    c.line([h_prev.left[0], turn, turn], [0.55, 0.55, bus], color=purple, width=1.2)
    stops = [turn] + [v for x in reversed(xs[1:]) for v in (x - 0.05, x - 0.15)] + [xs[0] + 0.1]
    for a, b in zip(stops[::2], stops[1::2]):
        c.line([a, b], [bus, bus], color=purple, width=1.2)
    for x in xs:
        c.arrow((x + 0.1, bus), (x + 0.1, 1.03), color=purple, width=1.0)
    c.text(turn + 0.04, 1.03, "scores\nevery fⱼ", size=7.5, color=purple, ha="left")

    ctx = c.box(hx, 2.35, 1.05, 0.42, "cᵢ = Σ αᵢⱼ fⱼ", kind="attention", size=9)
    c.line([xs[0] - 0.2, xs[0] - 0.2, xs[-1] + 0.2, xs[-1] + 0.2], [2.2, 2.3, 2.3, 2.2], color="#888888")
    c.arrow(((xs[0] + xs[-1]) / 2, 2.3), ctx.left, corners=[((xs[0] + xs[-1]) / 2, 2.6), (hx - 0.75, 2.6),
                                                           (hx - 0.75, 2.35)])
    c.text((xs[0] + xs[-1]) / 2, 2.75, "weighted average of the features", size=7.5, color=MUTED)
    c.shape(hx, 2.72, s["context"])

    lx = 5.85
    lstm = c.box(lx, 1.45, 0.9, 0.5, "LSTM", kind="rnn", size=9, weight="bold")
    c.arrow(ctx.right, (lx - 0.2, lstm.top[1]), corners=[(lx - 0.2, 2.35)])
    c.arrow((lx - 0.2, 2.95), (lx - 0.2, 2.4), width=1.0)
    c.text(lx - 0.12, 2.95, "yᵢ₋₁ (embedded)", size=8, ha="left")
    c.text(lx - 0.1, 2.08, "[yᵢ₋₁ ; cᵢ]", size=8, ha="left")
    c.shape(lx - 0.1, 1.9, s["lstm_in"], ha="left")
    c.arrow(h_prev.right, (lx, lstm.bottom[1]), corners=[(lx, 0.55)])
    out = c.box(7.0, 1.45, 0.85, 0.5, "Linear", kind="output", size=9)
    c.arrow(lstm.right, out.left)
    c.text((lstm.right[0] + out.left[0]) / 2, 1.62, "hᵈᵢ", size=8.5)
    c.shape(6.92, 1.02, s["out_in"], "[hᵈᵢ; cᵢ]")  # a little left of the box: the label is wide
    c.shape(6.92, 0.84, s["logits"], "logits")
    c.arrow(ctx.right, (7.0, out.top[1]), corners=[(7.0, 2.35)], color="#888888", dashed=True)
    return c


def soft_lookup() -> Canvas:
    """Chapter 3: a dictionary's exact match beside attention's weighted average."""
    s = shapes.soft_lookup()
    c = Canvas(7.6, 3.5)
    c.title("A dictionary picks one value; attention averages all of them")
    words, legs = s["words"], s["legs"]
    row = 0.4
    top = 2.45
    # Left: the dictionary.
    c.text(1.25, top + 0.47, "dict: exact match", size=9, weight="bold")
    c.box(0.35, top - 2 * row, 0.46, 0.3, "'spider'", kind="tensor", size=8)
    for k, w in enumerate(words):
        y = top - k * row
        hit = w == "spider"
        c.box(1.2, y, 0.8, 0.3, w, kind="ffn" if hit else "plain", size=8.5, weight="bold" if hit else "normal")
        c.box(1.95, y, 0.4, 0.3, str(legs[w]), kind="embed" if hit else "plain", size=8.5)
    c.arrow((0.35, top - 2 * row + 0.15), (0.8, top - 4 * row), corners=[(0.35, top - 4 * row)], color="#4a7fb5")
    c.text(1.25, top - 5 * row + 0.02, "returns 8; 'kitten' raises KeyError", size=7.5, color=MUTED)
    c.line([2.45, 2.45], [0.25, 3.0], color="#dddddd")

    # Right: attention over the same table.
    x_q, x_k, x_bar, x_v = 2.95, 4.0, 5.05, 6.35
    c.text(5.0, top + 0.47, f"attention: every key gets a weight (β = {s['beta']:g})", size=9, weight="bold")
    c.box(x_q, top - 2 * row, 0.62, 0.42, "q\ncat/ant", kind="tensor", size=7.5)
    c.shape(x_q, top - 2 * row - 0.36, s["q"], "q")
    for k, (w, a) in enumerate(zip(words, s["weights"])):
        y = top - k * row
        key = c.box(x_k, y, 0.8, 0.3, w, kind="plain", size=8.5)
        c.arrow((x_q + 0.31, top - 2 * row), key.left, color="#bbbbbb", width=0.7)
        c.rect(x_bar - 0.45, y - 0.11, 1.2 * a, 0.22, fill=KINDS["attention"][1], edge="none")
        c.text(x_bar - 0.45 + 1.2 * a + 0.06, y, f"{a:.2f}", size=7.5, mono=True, ha="left")
        c.box(x_v, y, 0.4, 0.3, str(legs[w]), kind="embed", size=8.5)
        c.text(x_v - 0.36, y, "×", size=9, color=MUTED)
    c.text(x_k, top + 0.02 + row * 0.5, "keys", size=7.5, color=MUTED)
    c.text(x_bar - 0.1, top + 0.02 + row * 0.5, "weights α", size=7.5, color=MUTED)
    c.text(x_v, top + 0.02 + row * 0.5, "values", size=7.5, color=MUTED)
    c.shape(x_k, top - 5 * row + 0.12, s["K"], "K")
    c.shape(x_v, top - 5 * row + 0.12, s["V"], "V")
    total = c.box(7.1, top - 2 * row, 0.5, 0.4, f"{s['out']:.2f}", kind="ffn", size=9, weight="bold")
    c.arrow((x_v + 0.2, top - 2 * row), total.left)
    c.text(7.1, top - 2 * row - 0.36, "Σ αⱼ vⱼ", size=8.5)
    return c
