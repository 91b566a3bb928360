"""Diagrams of decoding and of Part III: a beam-search tree (chapter 10), sequential steps against one
parallel layer and the growing T x T matrix (chapter 11), the three families (chapter 12), and byte-level
BPE merges (the chapter on tokens)."""

from __future__ import annotations

import math

from . import shapes
from .canvas import INK, MUTED, Canvas

# Next-token probabilities of a toy model for the beam-search picture: prefix -> {token: probability}.
# Greedy decoding takes "2" first and ends with a less probable sequence than beam search finds.
TOY_MODEL = {
    (): {"2": 0.5, "4": 0.4, "7": 0.1},
    ("2",): {"4": 0.4, ",": 0.35, "7": 0.25},
    ("4",): {"2": 0.9, ",": 0.1},
    ("2", "4"): {"<eos>": 0.6, ",": 0.4},
    ("2", ","): {"7": 0.7, "4": 0.3},
    ("4", "2"): {"<eos>": 0.95, ",": 0.05},
    ("4", ","): {"2": 1.0},
}
BEAM = 2


def beam_search() -> Canvas:
    """Chapter 10: beam search with two beams on a toy model; each node shows its log-probability."""
    c = Canvas(7.6, 3.4)
    c.title(f"Beam search, beam size {BEAM}: keep the {BEAM} most probable prefixes at every step")
    beams = [((), 0.0)]
    columns = [[((), 0.0, True)]]
    for _ in range(2):
        candidates = [(prefix + (tok,), score + math.log(p)) for prefix, score in beams
                      for tok, p in TOY_MODEL[prefix].items()]
        candidates.sort(key=lambda item: -item[1])
        kept = {prefix for prefix, _ in candidates[:BEAM]}
        columns.append([(prefix, score, prefix in kept) for prefix, score in candidates])
        beams = [(prefix, score) for prefix, score in candidates[:BEAM] if prefix[-1:] != ("<eos>",)]
        beams = [b for b in beams if b[0] in TOY_MODEL]
    where = {}
    xs = [0.8, 3.0, 5.5]
    for k, column in enumerate(columns):
        # The children of each parent sit together, parents in the order of the previous column.
        if k:
            order = {prefix: n for n, (prefix, _, _) in enumerate(columns[k - 1])}
            column = sorted(column, key=lambda item: (order[item[0][:-1]], -item[1]))
        n = len(column)
        for m, (prefix, score, kept) in enumerate(column):
            y = 1.65 + (n - 1) / 2 * 0.42 - m * 0.42
            where[prefix] = (xs[k], y)
            label = "<bos>" if not prefix else prefix[-1]
            c.box(xs[k], y, 0.62, 0.3, label, kind="ffn" if kept else "plain", size=8.5,
                  weight="bold" if kept else "normal")
            if prefix:
                c.text(xs[k] + 0.38, y, f"{score:.2f}", size=7.5, mono=True, ha="left",
                       color=INK if kept else "#aaaaaa")
                px, py = where[prefix[:-1]]
                c.arrow((px + 0.31 + (0.55 if prefix[:-1] else 0), py), (xs[k] - 0.31, y),
                        color="#444444" if kept else "#cccccc", width=1.0 if kept else 0.7)
    greedy = [max(TOY_MODEL[()], key=TOY_MODEL[()].get)]
    greedy.append(max(TOY_MODEL[tuple(greedy)], key=TOY_MODEL[tuple(greedy)].get))
    greedy_score = math.log(TOY_MODEL[()][greedy[0]]) + math.log(TOY_MODEL[tuple(greedy[:1])][greedy[1]])
    best, best_score, _ = max((item for item in columns[-1] if item[2]), key=lambda item: item[1])
    c.text(6.9, 0.86, "after step 2:", size=7.5, color=MUTED, ha="center")
    c.text(6.9, 0.58, f"greedy: {' '.join(greedy)} ({greedy_score:.2f})\nbeam: {' '.join(best)} ({best_score:.2f})",
           size=8, ha="center", weight="bold")
    c.text(xs[1], 0.2, "step 1", size=8, color=MUTED)
    c.text(xs[2], 0.2, "step 2", size=8, color=MUTED)
    c.text(6.9, 2.5, "blue: kept\nwhite: dropped", size=7.5, color=MUTED, ha="center")
    c.text(6.9, 1.3, "numbers: sum of\nlog-probabilities", size=7.5, color=MUTED, ha="center")
    return c


def sequential_vs_parallel() -> Canvas:
    """Chapter 11: an RNN's chain of T steps against one attention layer, and the T x T weights."""
    s = shapes.cost()
    c = Canvas(7.6, 3.5)
    c.title("T steps one after another, or one layer at once, at the price of T × T weights")
    T = 6
    xs = [0.5 + k * 0.5 for k in range(T)]
    for k, x in enumerate(xs):
        c.box(x, 2.35, 0.36, 0.32, str(k + 1), kind="rnn", size=8)
        c.arrow((x, 1.92), (x, 2.19), width=0.8)
        c.text(x, 1.82, f"x{chr(0x2081 + k)}", size=8)
        if k:
            c.arrow((xs[k - 1] + 0.18, 2.35), (x - 0.18, 2.35), width=0.9)
    c.text((xs[0] + xs[-1]) / 2, 2.8, f"RNN: step t waits for step t − 1 ({T} in a row)", size=8, weight="bold")
    y_in, y_out = 0.45, 1.25
    for k, x in enumerate(xs):
        c.text(x, y_in - 0.05, f"x{chr(0x2081 + k)}", size=8)
        c.box(x, y_out, 0.36, 0.3, "z" + chr(0x2081 + k), kind="attention", size=8)
        for x_src in xs:
            c.line([x_src, x], [y_in + 0.1, y_out - 0.15], color="#d9a66c", width=0.5)
    c.text((xs[0] + xs[-1]) / 2, 1.6, "attention: every output at once (one step)", size=8, weight="bold")
    # The weights of one head for the chapter's lengths, squares drawn to scale.
    largest = s["T_values"][-1]
    side = 2.3
    x0, y0 = 4.0, 0.3
    for T_value in reversed(s["T_values"]):
        a = side * T_value / largest
        c.rect(x0, y0, a, a, fill="#fde7cf" if T_value != largest else "#fff6ec", edge="#c0772b", width=0.8)
    for T_value in s["T_values"][-3:]:
        shape, n_bytes = s["weights"][T_value]
        a = side * T_value / largest
        # Every label to the right of the largest square, level with the top of its own square.
        if T_value != largest:
            c.line([x0 + a, x0 + side + 0.03], [y0 + a, y0 + a], color="#c0772b", width=0.6, dashed=True)
        c.text(x0 + side + 0.06, y0 + a, f"T = {T_value}: {n_bytes / 2**20:g} MiB", size=7.5, ha="left")
        if T_value == largest:  # one shape is enough; inside the largest square, where there is room
            c.shape(x0 + a - 0.08, y0 + a - 0.14, shape, ha="right", size=7)
    c.text(x0 + side / 2, y0 + side + 0.14, "weights of one head, float32", size=8, weight="bold")
    return c


def families() -> Canvas:
    """Chapter 12: encoder-only, decoder-only and encoder-decoder, built from the same layers."""
    s = shapes.families()
    cfg = s["config"]
    c = Canvas(7.6, 3.8)
    c.title(f"Three families from one configuration: d = {cfg.d_model}, vocabulary {s['V']}")
    n, cell = 5, 0.2
    full = [[True] * n for _ in range(n)]
    causal = [[j <= i for j in range(n)] for i in range(n)]
    columns = [
        ("encoder-only (BERT)", [(full, "no mask: both sides")],
         [(f"{cfg.num_encoder_layers} × encoder layer", "attention")], "predict masked tokens", "EncoderOnlyLM"),
        ("decoder-only (GPT)", [(causal, "causal mask")],
         [(f"{cfg.num_decoder_layers} × decoder layer,\nno cross-attention", "attention")], "predict the next token",
         "DecoderOnlyLM"),
        ("encoder-decoder (T5)", [(full, "encoder"), (causal, "decoder")],
         [(f"{cfg.num_encoder_layers} × encoder\nlayer", "attention"),
          (f"{cfg.num_decoder_layers} × decoder\nlayer with\ncross-attention", "attention")],
         "predict the target\ngiven the source", "Transformer"),
    ]
    for k, (title, grids, stacks, objective, cls) in enumerate(columns):
        x = 1.3 + k * 2.5
        c.text(x, 3.25, title, size=9, weight="bold")
        gx = x - (len(grids) * (n * cell + 0.25) - 0.25) / 2
        centres = []
        for grid, label in grids:
            left, bottom, right, top = c.grid(gx, 3.0, grid, cell)
            c.text((left + right) / 2, bottom - 0.12, label, size=7, color=MUTED)
            centres.append((left + right) / 2)
            gx += n * cell + 0.25
        if len(stacks) == 1:
            c.box(x, 1.5, 2.0, 0.55, stacks[0][0], kind=stacks[0][1], size=7.5)
        else:
            # Encoder and decoder, each under its own mask, the encoder's output carried into the decoder.
            boxes = [c.box(sx, 1.5, 0.8, 0.55, label, kind=kind, size=6.5)
                     for sx, (label, kind) in zip(centres, stacks)]
            c.arrow(boxes[0].right, boxes[1].left, width=1.0)
            c.text((boxes[0].right[0] + boxes[1].left[0]) / 2, 1.62, "memory", size=6.5, color=MUTED)
        c.text(x, 0.88, objective, size=8, va="center")
        c.text(x, 0.42, f"tfmini.{cls}", size=7.5, mono=True, color=MUTED)
    return c


def bpe_merges() -> Canvas:
    """The tokens chapter: UTF-8 bytes of "aaabdaaabac", then each merge the tokenizer learns."""
    s = shapes.bpe()
    steps = s["steps"]
    c = Canvas(7.6, 3.5)
    c.title(f'Byte-level BPE on "{s["text"]}": merge the most frequent pair, again and again')
    unit = 0.44
    x0 = 2.55
    lengths = {b: 1 for b in range(256)}
    for k, (pair, _) in enumerate(steps[1:]):
        lengths[256 + k] = lengths[pair[0]] + lengths[pair[1]]
    text = s["text"]
    for j, ch in enumerate(text):
        c.text(x0 + (j + 0.5) * unit, 2.95, ch, size=10, mono=True, weight="bold")
    c.text(x0 - 0.15, 2.95, "text", size=8.5, ha="right", color=MUTED)
    for row, (pair, ids) in enumerate(steps):
        y = 2.45 - row * 0.62
        if pair is None:
            label = "UTF-8 bytes"
        else:
            new_id = 255 + row
            label = f"merge {row}: ({pair[0]}, {pair[1]}) → {new_id} '{s['vocab'][row - 1]}'"
        c.text(x0 - 0.15, y, label, size=8, ha="right", mono=pair is not None)
        pos = 0
        for token in ids:
            width = lengths[token] * unit
            kind = "plain" if token < 256 else ("attention", "ffn", "embed")[(token - 256) % 3]
            fresh = pair is not None and token == 255 + row
            c.box(x0 + pos * unit + width / 2, y, width - 0.05, 0.36, str(token), kind=kind, size=8,
                  weight="bold" if fresh else "normal")
            pos += lengths[token]
    last = steps[-1][1]
    c.text(x0 + len(text) * unit / 2, 0.22, f"{len(text)} bytes → {len(last)} tokens after {len(steps) - 1} merges",
           size=8, color=MUTED)
    return c


def representations_checkpoints() -> Canvas:
    """Chapter 13: (a) the probe reads the vector of "it", the agreement test the prediction at the hidden noun;
    (b) how GPT-2's weights map onto tfmini's
    DecoderOnlyLM: the names, the split of the packed projection, and the transposes."""
    c = Canvas(7.6, 5.6)
    c.title("(a) What does the vector of “it” carry?   (b) GPT-2's weights in tfmini")
    # (a) The pipeline of the probe and the agreement test.
    y = 4.75
    words = "the chicken didn't cross the road because it was too tired .".split()
    x = 0.3
    for w in words:
        width = 0.11 + 0.075 * len(w)
        c.box(x + width / 2, y, width, 0.3, w, kind="output" if w == "it" else "tensor", size=7)
        x += width + 0.05
    enc = c.box(3.0, y - 0.72, 2.6, 0.36, "EncoderOnlyLM: both sides, no mask", kind="attention", size=8)
    c.arrow((3.0, y - 0.16), enc.top, width=1.0)
    vec = c.box(5.35, y - 0.72, 1.0, 0.32, "vector of “it”", kind="output", size=7.5)
    c.arrow(enc.right, vec.left, width=1.0)
    probe = c.box(6.75, y - 0.38, 1.25, 0.3, "linear probe:\nanimal or place?", kind="plain", size=7)
    agree = c.box(6.75, y - 1.06, 1.25, 0.3, "hide the noun:\nagrees with “it”?", kind="plain", size=7)
    c.arrow(vec.right, probe.left, width=1.0)
    # (c) reads the prediction at the hidden noun, not the vector of "it": its arrow leaves the encoder
    c.arrow((enc.right[0], enc.right[1] - 0.16), agree.left, width=1.0)

    # (b) The names of one GPT-2 block and of the same weights in tfmini.
    rows = [
        ("transformer.wte", "decoder.embed.embedding", ""),
        ("transformer.wpe", "decoder.pos.embedding", ""),
        ("h.i.ln_1", "layers.i.norm1", ""),
        ("h.i.attn.c_attn  (d, 3d)", "self_attn.q_proj, k_proj, v_proj", "split in 3, transpose"),
        ("h.i.attn.c_proj", "self_attn.out_proj", "transpose"),
        ("h.i.ln_2", "layers.i.norm3", "no cross-attention: no norm2"),
        ("h.i.mlp.c_fc", "ff.linear1", "transpose"),
        ("h.i.mlp.c_proj", "ff.linear2", "transpose"),
        ("transformer.ln_f", "decoder.norm", ""),
        ("lm_head = wte", "decoder.lm_head = embed", "tied"),
    ]
    top, step = 3.25, 0.29
    c.text(1.35, top + 0.2, "Hugging Face GPT2LMHeadModel", size=8, weight="bold")
    c.text(4.55, top + 0.2, "tfmini DecoderOnlyLM", size=8, weight="bold")
    for k, (theirs, ours, how) in enumerate(rows):
        yk = top - (k + 0.5) * step
        left = c.box(1.35, yk, 2.3, step - 0.05, theirs, kind="tensor", size=6.8)
        right = c.box(4.55, yk, 2.5, step - 0.05, ours, kind="embed" if "embed" in ours or "pos" in ours else
                      "attention" if "attn" in ours else "ffn" if "ff." in ours else "norm" if "norm" in ours else
                      "output", size=6.8)
        c.arrow(left.right, right.left, width=0.9)
        if how:
            c.text(5.9, yk, how, size=6.8, color=MUTED, ha="left")
    c.text(3.8, 0.2, "GPT-2 stores its linear maps as (in, out), PyTorch's nn.Linear as (out, in); "
                     "h.i. = block i of transformer.h", size=6.8, color=MUTED, va="bottom")
    return c
