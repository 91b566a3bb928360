"""Diagrams of the Transformer's pieces: the quick tour's model (chapter 0), scaled dot-product attention
(4), the multi-head split and merge (5), sinusoidal positions (6), the block (7), masks and the decoder
layer (8), the full model and its KV cache (9)."""

from __future__ import annotations

import math

from . import shapes
from .canvas import KINDS, MUTED, Box, Canvas


def _labelled_arrow(c: Canvas, start, end, shape=None, name: str = "", side: str = "right", offset: float = 0.06,
                    corners=()) -> None:
    """An arrow carrying a tensor, with its shape written beside the middle of its last segment."""
    c.arrow(start, end, corners=corners)
    if shape is not None:
        a = corners[-1] if corners else start
        x, y = (a[0] + end[0]) / 2, (a[1] + end[1]) / 2
        if abs(a[0] - end[0]) < 1e-9:  # vertical
            c.shape(x + (offset if side == "right" else -offset), y, shape, name,
                    ha="left" if side == "right" else "right")
        else:
            c.shape(x, y + 0.1, shape, name)


def _stack(c: Canvas, x: float, y0: float, w: float, rows: list[tuple[str, str]], gap: float = 0.1,
           h: float = 0.34) -> list[Box]:
    """Sub-layer boxes from the bottom up, joined by arrows; returns them bottom first."""
    boxes = []
    for k, (label, kind) in enumerate(rows):
        y = y0 + k * (h + gap) + h / 2
        boxes.append(c.box(x, y, w, h, label, kind=kind, size=8.5))
        if k:
            c.arrow(boxes[k - 1].top, boxes[k].bottom, width=1.0)
    return boxes


def _with_norms(rows: list[tuple[str, str]], pre_ln: bool) -> list[tuple[str, str]]:
    """The sub-layers of a layer with their LayerNorms: before each (pre-LN), or after each with the
    residual addition (post-LN, the paper's "Add & Norm"). The residual connections are not drawn."""
    out = []
    for row in rows:
        out += [("LayerNorm", "norm"), row] if pre_ln else [row, ("add & LayerNorm", "norm")]
    return out


def _encoder_decoder(c: Canvas, s: dict, title: str, pre_ln: bool) -> None:
    """The encoder-decoder of chapters 0 and 9, with the shapes of one forward pass."""
    cfg = s["config"]
    c.title(title)
    xe, xd, w = 1.85, 5.6, 2.3
    # Encoder column.
    src_y = 0.42
    c.text(xe, src_y, "source ids", size=8.5, style="italic")
    emb_e = c.box(xe, 1.05, w, 0.4, "embedding × √d + positions", kind="embed", size=8.5)
    _labelled_arrow(c, (xe, src_y + 0.12), emb_e.bottom, s["src"])
    enc_rows = _with_norms([("multi-head self-attention", "attention"), ("feed-forward", "ffn")], pre_ln)
    enc = _stack(c, xe, 1.62, w - 0.4, enc_rows, gap=0.08, h=0.3)
    c.frame(xe - w / 2, 1.5, xe + w / 2, enc[-1].top[1] + 0.3, f"{cfg.num_encoder_layers} × encoder layer")
    _labelled_arrow(c, emb_e.top, enc[0].bottom, s["embedded"])
    top_e = enc[-1].top[1] + 0.3
    if pre_ln:
        fin = c.box(xe, top_e + 0.35, w - 0.4, 0.3, "final LayerNorm", kind="norm", size=8.5)
        c.arrow(enc[-1].top, fin.bottom)
        top_e = fin.top[1]
    mem_y = top_e + 0.4
    c.arrow((xe, top_e), (xe, mem_y))
    c.text(xe, mem_y + 0.12, "memory", size=8.5, weight="bold")
    c.shape(xe, mem_y + 0.3, s["memory"])

    # Decoder column.
    c.text(xd, src_y, "target ids, shifted right (starts with <bos>)", size=8.5, style="italic")
    emb_d = c.box(xd, 1.05, w, 0.4, "embedding × √d + positions", kind="embed", size=8.5)
    _labelled_arrow(c, (xd, src_y + 0.12), emb_d.bottom, s["tgt_in"])
    dec_rows = _with_norms([("causal self-attention", "attention"), ("cross-attention", "attention"),
                            ("feed-forward", "ffn")], pre_ln)
    dec = _stack(c, xd, 1.62, w - 0.4, dec_rows, gap=0.08, h=0.3)
    c.frame(xd - w / 2, 1.5, xd + w / 2, dec[-1].top[1] + 0.3, f"{cfg.num_decoder_layers} × decoder layer",
            label_pos="top-right")
    cross = next(b for b, (label, _) in zip(dec, dec_rows) if label == "cross-attention")
    gap = (xe + xd) / 2
    c.arrow((xe, mem_y - 0.2), cross.left, corners=[(gap, mem_y - 0.2), (gap, cross.y)], color=KINDS["attention"][1])
    c.text(gap + 0.06, (mem_y + cross.y) / 2, "keys and\nvalues", size=7.5, color=KINDS["attention"][1], ha="left")
    c.text(gap, cross.y - 0.2, "cross-attention\nweights", size=7.5, color=MUTED, va="top")
    c.shape(gap, cross.y - 0.58, s["cross_weights"], size=7.5)
    _labelled_arrow(c, emb_d.top, dec[0].bottom, None)
    top_d = dec[-1].top[1] + 0.3
    y = top_d
    if pre_ln:
        fin = c.box(xd, y + 0.35, w - 0.4, 0.3, "final LayerNorm", kind="norm", size=8.5)
        c.arrow(dec[-1].top, fin.bottom)
        y = fin.top[1]
    head_label = "linear\n(tied to the target embedding)" if cfg.tie_weights else "linear"
    head = c.box(xd, y + 0.5, w - 0.4, 0.42, head_label, kind="output", size=8.5)
    c.arrow((xd, y), head.bottom)
    c.arrow(head.top, (xd, head.top[1] + 0.3))
    c.text(xd, head.top[1] + 0.42, "logits: next-token scores", size=8.5, weight="bold")
    c.shape(xd, head.top[1] + 0.6, s["logits"])


def quick_tour_model() -> Canvas:
    """Chapter 0: the whole model of the quick tour at a glance."""
    s = shapes.quick_tour()
    c = Canvas(7.6, 6.0)
    cfg = s["config"]
    _encoder_decoder(c, s, f"The quick tour's Transformer: d = {cfg.d_model}, {cfg.num_heads} heads, "
                     f"feed-forward width {cfg.ffn_dim}", pre_ln=cfg.norm_first)
    return c


def full_transformer() -> Canvas:
    """Chapter 9: the encoder-decoder with pre-LN layers, as the chapter configures it."""
    s = shapes.full_transformer()
    cfg = s["config"]
    c = Canvas(7.6, 6.55)
    _encoder_decoder(c, s, f"The encoder-decoder of chapter 9 (pre-LN): d = {cfg.d_model}, {cfg.num_heads} heads, "
                     f"d_ff = {cfg.ffn_dim}", pre_ln=cfg.norm_first)
    return c


def scaled_dot_product() -> Canvas:
    """Chapter 4: softmax(Q Kᵀ / √d_k) V as a data flow, with the shapes of the five-word example."""
    s = shapes.self_attention()
    c = Canvas(7.6, 3.3)
    c.title("Scaled dot-product self-attention")
    x_in = c.box(0.75, 1.55, 0.9, 1.1, "", kind="embed")
    for k, word in enumerate(s["words"]):
        c.text(0.75, 1.95 - k * 0.2, word, size=8, style="italic")
    c.shape(0.75, 0.8, s["X"], "X")
    rows = {"Q": 2.55, "K": 1.55, "V": 0.55}
    proj = {}
    for name, y in rows.items():
        proj[name] = c.box(2.05, y, 0.7, 0.36, rf"$\times\ W^{name}$", kind="plain", size=10)
        c.arrow(x_in.right, proj[name].left, corners=[(1.45, 1.55), (1.45, y)] if y != 1.55 else ())
        c.arrow(proj[name].right, (2.95, y))
        c.text(3.05, y, name, size=10, weight="bold", ha="left")
        c.shape(3.05, y - 0.22, s[name], ha="left")
    mm = c.box(4.3, 2.05, 1.05, 0.42, "Q Kᵀ / √dₖ", kind="attention", size=9)
    c.text(4.3, 1.7, f"dₖ = {s['d_k']}, √{s['d_k']} = {math.sqrt(s['d_k']):g}", size=7.5, color=MUTED)
    c.arrow((3.3, 2.55), mm.left, corners=[(3.7, 2.55), (3.7, 2.05)])
    c.arrow((3.3, 1.55), mm.left, corners=[(3.7, 1.55), (3.7, 2.05)])
    sm = c.box(5.6, 2.05, 0.9, 0.42, "softmax\nover keys", kind="attention", size=8.5)
    c.arrow(mm.right, sm.left)
    c.shape((mm.right[0] + sm.left[0]) / 2, 2.4, s["scores"])
    av = c.box(5.6, 0.95, 0.9, 0.42, "weights × V", kind="attention", size=8.5)
    c.arrow(sm.bottom, av.top)
    c.shape(5.68, 1.5, s["weights"], "α", ha="left")
    c.arrow((3.3, 0.55), av.left, corners=[(4.9, 0.55), (4.9, 0.95)])
    c.arrow(av.right, (6.75, 0.95))
    c.text(6.85, 0.95, "Z", size=10, weight="bold", ha="left")
    c.shape(6.85, 0.73, s["Z"], ha="left")
    c.text(6.55, 2.05, "each row\nsums to 1", size=7.5, color=MUTED)
    return c


def multi_head_split() -> Canvas:
    """Chapter 5: project once, split the width into heads, attend per head, merge, project."""
    s = shapes.multi_head()
    d, H = s["d"], s["H"]
    dk = d // H
    c = Canvas(7.6, 3.7)
    c.title(f"Multi-head attention: {H} heads of width d/H = {dk}")
    colours = ["#4a7fb5", "#c0772b", "#4f9a56", "#7b5aa6", "#b55454", "#a8861a", "#5c5c5c", "#2a9d8f"]
    cell = 0.1
    yc = 1.75
    x_in = c.box(0.45, yc, 0.5, 0.5, "X", kind="embed", size=11, weight="bold")
    c.shape(0.45, yc - 0.42, s["X"], size=7.5)
    proj = c.box(1.3, yc, 0.75, 0.5, r"$\times\ W^Q$" + "\n(d × d)", kind="plain", size=8.5)
    c.arrow(x_in.right, proj.left)
    c.text(1.3, yc + 0.42, "and Wᴷ, Wⱽ", size=7.5, color=MUTED)
    # The projected width as one strip of d columns, coloured by head.
    x0 = 1.9
    for j in range(d):
        c.rect(x0 + j * cell, yc - 0.14, cell, 0.28, fill=colours[j // dk % len(colours)])
    c.arrow(proj.right, (x0 - 0.02, yc))
    c.shape(x0 + d * cell / 2, yc - 0.32, s["projected"], "Q", size=7.5)
    c.text(x0 + d * cell / 2, yc + 0.34, "one product, all heads", size=7.5, color=MUTED)
    # Split: the strip becomes H stacked blocks.
    xs = x0 + d * cell + 0.55
    c.arrow((x0 + d * cell + 0.04, yc), (xs - 0.08, yc))
    c.text((x0 + d * cell + xs) / 2, yc + 0.14, "split", size=8, weight="bold")
    ys = [yc + (H - 1) / 2 * 0.62 - h * 0.62 for h in range(H)]
    xa = xs + dk * cell + 0.8
    for h, y in enumerate(ys):
        for j in range(dk):
            c.rect(xs + j * cell, y - 0.14, cell, 0.28, fill=colours[h % len(colours)])
        c.box(xa, y, 0.9, 0.4, f"head {h + 1}", kind="attention", size=8.5)
        c.arrow((xs + dk * cell + 0.04, y), (xa - 0.45, y))
    c.shape(xs + dk * cell / 2, ys[-1] - 0.36, s["split"], size=7.5)
    c.text(xs + dk * cell / 2, ys[-1] - 0.56, "b t (h dk) → b h t dk", size=7.5, color=MUTED, mono=True)
    c.text(xa, ys[0] + 0.42, f"softmax(QKᵀ/√{dk}) V, each head", size=7.5, color=MUTED)
    c.shape(xa, ys[-1] - 0.36, s["weights"], "α", size=7.5)
    # Merge: the heads' outputs side by side again, then the output projection.
    xm = xa + 0.45 + 0.5
    for y in ys:
        c.arrow((xa + 0.45, y), (xm - 0.04, yc), width=0.9)
    for j in range(d):
        c.rect(xm + j * cell, yc - 0.14, cell, 0.28, fill=colours[j // dk % len(colours)])
    c.text(xm + d * cell / 2, yc + 0.34, "merge", size=8, weight="bold")
    c.text(xm + d * cell / 2, yc + 0.52, "b h t dk → b t (h dk)", size=7.5, color=MUTED, mono=True)
    c.shape(xm + d * cell / 2, yc - 0.32, s["merged"], size=7.5)
    out = c.box(xm + d * cell / 2, 0.88, 0.75, 0.36, r"$\times\ W^O$", kind="plain", size=9)
    c.arrow((xm + d * cell / 2, yc - 0.45), out.top)
    c.arrow(out.bottom, (out.x, 0.44))
    c.shape(out.x, 0.32, s["out"], "out", size=7.5)
    return c


def sinusoid_pairs() -> Canvas:
    """Chapter 6: each (sin, cos) pair of the encoding is a point turning on a circle at its own speed."""
    s = shapes.positional()
    d = s["d_model"]
    table, omega = s["table"], s["omega"]
    pairs = [0, 1, 2, 3, d // 2 - 1]
    positions = len(table)
    c = Canvas(7.6, 3.0)
    c.title(f"Sinusoidal positions, d = {d}: pair i turns by ωᵢ per position")
    r = 0.55
    palette = ["#440154", "#46327e", "#365c8d", "#277f8e", "#1fa187", "#4ac16d", "#a0da39", "#fde725"]
    for k, i in enumerate(pairs):
        cx, cy = 0.8 + k * 1.5, 1.5
        c.circle(cx, cy, r, color="#bbbbbb")
        c.line([cx - r - 0.08, cx + r + 0.08], [cy, cy], color="#e0e0e0", width=0.7)
        c.line([cx, cx], [cy - r - 0.08, cy + r + 0.08], color="#e0e0e0", width=0.7)
        for p in range(positions):
            x, y = table[p][2 * i + 1], table[p][2 * i]     # (cos, sin) of the angle p ωᵢ: turning anticlockwise
            c.circle(cx + r * x, cy + r * y, 0.045, color="none", fill=palette[p % len(palette)], zorder=4)
        x1, y1 = table[1][2 * i + 1], table[1][2 * i]
        c.arrow((cx, cy), (cx + r * x1, cy + r * y1), color="#c0772b", width=1.0)
        c.text(cx, cy - r - 0.22, f"pair i = {i}", size=8.5, weight="bold")
        c.text(cx, cy - r - 0.42, f"ω = {omega[i]:.3g}", size=8, mono=True, color=MUTED)
        c.text(cx, cy + r + 0.16, f"sin: dim {2 * i}, cos: dim {2 * i + 1}", size=7, color=MUTED)
        if k == 3:
            c.text(cx + 0.75, cy, "…", size=12, color=MUTED)
    for p in range(positions):
        c.circle(4.3 + p * 0.38, 0.2, 0.045, color="none", fill=palette[p % len(palette)])
        c.text(4.3 + p * 0.38 + 0.08, 0.2, str(p), size=7.5, ha="left", color=MUTED)
    c.text(4.2, 0.2, "position p:", size=7.5, ha="right", color=MUTED)
    c.shape(0.3, 0.2, s["pe"], "PE table", ha="left")
    return c


def _block(c: Canvas, x: float, s: dict, pre_ln: bool) -> None:
    """One encoder layer, bottom to top, with its residual connections."""
    w = 1.9
    y = 0.55
    c.text(x, 0.28, "x", size=9, weight="bold")
    c.shape(x + 0.12, 0.28, s["x"], ha="left")
    rows = []
    for sub, kind, label in (("attn", "attention", "multi-head self-attention"), ("ffn", "ffn", "feed-forward")):
        if pre_ln:
            rows += [("LayerNorm", "norm", None), (label, kind, sub), ("+", None, None)]
        else:
            rows += [(label, kind, sub), ("+", None, None), ("LayerNorm", "norm", None)]
    prev = (x, y - 0.05)
    branch = prev
    for label, kind, sub in rows:
        if label == "+":
            y += 0.3
            plus = c.plus(x, y)
            c.arrow(prev, plus.bottom, width=1.0)
            c.arrow(branch, plus.left, corners=[(x - w / 2 - 0.2, branch[1]), (x - w / 2 - 0.2, y)], width=1.0,
                    color="#888888")
            prev = plus.top
            y += 0.2
            continue
        first_of_sublayer = (pre_ln and label == "LayerNorm") or (not pre_ln and sub is not None)
        if first_of_sublayer:
            branch = (x, prev[1] + 0.07)
        b = c.box(x, y + 0.2, w, 0.32, label, kind=kind, size=8.5)
        c.arrow(prev, b.bottom, width=1.0)
        if sub == "attn":
            c.shape(x + w / 2 + 0.06, b.y, s["weights"], "α", ha="left", size=7.5)
        if sub == "ffn":
            c.shape(x + w / 2 + 0.06, b.y, s["ffn_hidden"], "hidden", ha="left", size=7.5)
        prev = b.top
        y += 0.5
    c.arrow(prev, (x, y + 0.05))
    c.shape(x, y + 0.17, s["out"], "out")


def block_post_pre_ln() -> Canvas:
    """Chapter 7: the encoder layer in the paper's post-LN order and in the pre-LN order."""
    s = shapes.encoder_block()
    c = Canvas(7.6, 4.75)
    c.title(f"The encoder layer: d = {s['d']}, {s['heads']} heads, d_ff = {s['d_ff']}")
    c.text(1.9, 4.22, "post-LN (the paper): LN(x + Sublayer(x))", size=8.5, weight="bold")
    c.text(5.35, 4.22, "pre-LN: x + Sublayer(LN(x))", size=8.5, weight="bold")
    c.text(5.35, 4.03, "(a pre-LN stack ends with one more LayerNorm)", size=7.5, color=MUTED)
    _block(c, 1.75, s["post"], pre_ln=False)
    _block(c, 5.2, s["pre"], pre_ln=True)
    return c


def _axes(c: Canvas, left: float, bottom: float, right: float, top: float) -> None:
    """The axes of a mask grid: a row per query (down the left side), a column per key (along the top)."""
    c.text(left - 0.6, (bottom + top) / 2, "query", size=7.5, color=MUTED, rotation=90)
    c.text((left + right) / 2, top + 0.5, "key →", size=7.5, color=MUTED)


def masks() -> Canvas:
    """Chapter 8: the causal mask, a key-padding mask, and the two combined."""
    s = shapes.masks()
    c = Canvas(7.6, 3.55)
    c.title("Masks: True (blue) = the query may attend to the key")
    cell = 0.24
    left, bottom, right, top = c.grid(0.95, 2.45, s["causal"], cell, rows=s["words"], cols=s["words"])
    c.text((left + right) / 2, bottom - 0.18, "causal_mask", size=8.5, weight="bold")
    c.shape((left + right) / 2, bottom - 0.36, s["causal_shape"])
    _axes(c, left, bottom, right, top)
    # Key padding: one row per sentence, the tokens written in.
    x0, y_top, wk = 2.6, 2.3, 0.42
    for b, (tokens, row) in enumerate(zip(s["tokens"], s["key_pad"])):
        for j, (tok, real) in enumerate(zip(tokens, row)):
            c.rect(x0 + j * wk, y_top - (b + 1) * 0.34, wk, 0.34, "#4a7fb5" if real else "#eeeeee")
            c.text(x0 + j * wk + wk / 2, y_top - (b + 0.5) * 0.34, tok, size=6.5,
                   color="white" if real else MUTED)
    c.text(x0 + 3 * wk, y_top - 0.96, "mask_from_ids (keys)", size=8.5, weight="bold")
    c.shape(x0 + 3 * wk, y_top - 1.14, s["key_pad_shape"])
    c.text(x0 + 3 * wk, y_top - 1.55, "causal & padding →", size=8.5, color=MUTED)
    left, bottom, right, top = c.grid(6.0, 2.45, s["both"], cell, rows=s["tokens"][1], cols=s["tokens"][1])
    _axes(c, left, bottom, right, top)
    c.text((left + right) / 2, bottom - 0.18, "both, sentence 2", size=8.5, weight="bold")
    c.shape((left + right) / 2, bottom - 0.36, s["both_shape"])
    c.text((left + right) / 2, bottom - 0.54, "attention_mask: (B, 1, T, S)", size=7.5, color=MUTED)
    return c


def decoder_layer() -> Canvas:
    """Chapter 8: the decoder layer's three sub-layers, cross-attention reading the encoder's memory."""
    s = shapes.decoder_layer()
    c = Canvas(7.6, 5.7)
    c.title(f"The decoder layer (post-LN): d = {s['D']}, {s['H']} heads, d_ff = {s['d_ff']}")
    x, w = 3.3, 2.3
    bypass = x - w / 2 - 0.22  # the residual lines run this far left of the boxes
    y = 0.35
    c.text(x, y, "x: decoder input", size=8.5, weight="bold")
    c.shape(x + 1.0, y, s["x"], ha="left")
    prev = (x, y + 0.12)
    subs = [("masked self-attention (causal)", "attention", s["self_weights"], "α self"),
            ("cross-attention", "attention", s["cross_weights"], "α cross"),
            ("feed-forward", "ffn", s["ffn_hidden"], "hidden")]
    y = 0.8
    cross_box = None
    for label, kind, shape, name in subs:
        # The residual branch leaves the stream halfway between the previous box and this sub-layer.
        branch = (x, (prev[1] + y) / 2)
        c.circle(*branch, 0.03, color="#888888", fill="#888888", zorder=4)
        b = c.box(x, y + 0.16, w, 0.32, label, kind=kind, size=8.5)
        c.arrow(prev, b.bottom, width=1.0)
        c.shape(bypass - 0.1, b.y, shape, name, ha="right", size=7.5)
        if label == "cross-attention":
            cross_box = b
        plus = c.plus(x, y + 0.62)
        c.arrow(b.top, plus.bottom, width=1.0)
        c.arrow(branch, plus.left, corners=[(bypass, branch[1]), (bypass, y + 0.62)], width=1.0, color="#888888")
        norm = c.box(x, y + 0.98, w, 0.26, "LayerNorm", kind="norm", size=8)
        c.arrow(plus.top, norm.bottom, width=1.0)
        prev = norm.top
        y += 1.42
    c.arrow(prev, (x, prev[1] + 0.22))
    c.shape(x, prev[1] + 0.33, s["out"], "out")
    mem = c.box(6.4, cross_box.y, 1.3, 0.5, "encoder output\n(memory)", kind="embed", size=8.5)
    c.shape(6.4, cross_box.y - 0.42, s["memory"])
    c.arrow(mem.left, cross_box.right, color=KINDS["attention"][1])
    c.text((mem.left[0] + cross_box.right[0]) / 2, cross_box.y + 0.14, "keys, values", size=7.5,
           color=KINDS["attention"][1])
    c.text((mem.left[0] + cross_box.right[0]) / 2, cross_box.y - 0.42, "queries come\nfrom the decoder", size=7.5,
           color=MUTED)
    return c


def kv_cache() -> Canvas:
    """Chapter 10: one decoding step with a KV cache: one new query against the cached keys and values."""
    s = shapes.kv_cache()
    t = s["steps"]
    c = Canvas(7.6, 3.3)
    c.title(f"Decoding step t = {t} with a KV cache (each of the {s['layers']} decoder layers keeps one)")
    # Without a cache: the whole t x t triangle again.
    cell = 0.27
    x0, y_top = 0.75, 2.6
    for i in range(t):
        for j in range(t):
            c.rect(x0 + j * cell, y_top - (i + 1) * cell, cell, cell,
                   "#c0772b" if j <= i and i == t - 1 else "#f2c594" if j <= i else "#eeeeee")
    xm = x0 + t * cell / 2
    c.text(xm, y_top - t * cell - 0.2, "without a cache:", size=8.5, weight="bold")
    c.text(xm, y_top - t * cell - 0.34, f"all {t} positions again,\nevery step", size=7.5, color=MUTED, va="top")
    c.text(xm, 0.5, "dark row: the only new one", size=7.5, color=MUTED)
    # With a cache: one query against all t cached keys, the last key and value new.
    cell = 0.3
    xk, yk, yv, yq = 3.3, 1.72, 1.27, 2.5
    for j in range(t):
        new = j == t - 1
        c.rect(xk + j * cell, yk, cell, cell, "#4a7fb5" if new else "#a9c4e0")
        c.rect(xk + j * cell, yv, cell, cell, "#4f9a56" if new else "#b5d9b8")
    c.text(xk - 0.08, yk + cell / 2, "K", size=9, weight="bold", ha="right")
    c.text(xk - 0.08, yv + cell / 2, "V", size=9, weight="bold", ha="right")
    c.shape(xk + t * cell + 0.1, yk + cell / 2, s["k"], "cache k", ha="left")
    c.shape(xk + t * cell + 0.1, yv + cell / 2, s["v"], "cache v", ha="left")
    c.text(xk + (t - 0.5) * cell, yv - 0.13, "new", size=7.5, color=MUTED)
    # The query, centred over the keys; its arrow ends on a bracket over the whole K row.
    xc = xk + t * cell / 2
    c.rect(xc - cell / 2, yq, cell, cell, "#c0772b")
    c.text(xc - cell / 2 - 0.08, yq + cell / 2, "q", size=9, weight="bold", ha="right")
    c.shape(xc + cell / 2 + 0.1, yq + cell / 2, s["q"], "query", ha="left")
    yb = yk + cell + 0.1
    c.line([xk, xk, xk + t * cell, xk + t * cell], [yb - 0.06, yb, yb, yb - 0.06], color="#444444", width=0.9)
    c.arrow((xc, yq), (xc, yb), width=0.9)
    c.text(xc + 0.08, (yq + yb) / 2, f"q attends to all {s['k'][2]} keys", size=7.5, color=MUTED, ha="left")
    c.text(xk + 1.6, 0.85, "scores: one row, not a triangle", size=8.5, weight="bold")
    c.shape(xk + 1.6, 0.65, s["scores"], "scores")
    c.text(xk + 1.6, 0.38, f"cross-attention: keys and values of the source cached once, {s['memory_k']}",
           size=7.5, color=MUTED)
    return c
