"""Draw the course's learning path for the landing page: images/learning_path.svg.

    python scripts/learning_path.py        # (re)writes images/learning_path.svg

Chapters 0-16 are boxes grouped in the parts of the table of contents (the quick tour above Part I,
then one column per part), and an arrow goes from a chapter to each chapter that builds on it. The
outline below is the course's plan, so the figure shows every chapter; tests/test_repo.py checks
that the parts agree with _toc.yml for the chapters it lists. The SVG is written deterministically
(fixed ids, no date), so re-running the script on an unchanged outline gives no diff.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path as FilePath

ROOT = FilePath(__file__).resolve().parent.parent
OUTPUT = ROOT / "images" / "learning_path.svg"

# (caption of the part in _toc.yml, column, [(chapter number, short title), ...]) in reading order.
# Parts that share a column are stacked in this order.
PARTS = [
    ("Getting started", 0, [(0, "Quick tour")]),
    ("Part I — From recurrence to attention", 0, [
        (1, "Sequence to\nsequence, RNNs"), (2, "Bahdanau\nattention"), (3, "Attention,\nin general"),
        (4, "Self-attention"),
    ]),
    ("Part II — The Transformer", 1, [
        (5, "Multi-head\nattention"), (6, "Positional\nencoding"), (7, "The Transformer\nblock"),
        (8, "Masking, decoder,\ncross-attention"), (9, "Encoder-decoder\nTransformer"),
        (10, "Decoding:\nKV cache, beam"),
    ]),
    ("Part III — Scale, families, tokens, modern decoder", 2, [
        (11, "Cost and\nparallelism"), (12, "Transformer\nfamilies"), (13, "Representations,\nreal checkpoints"),
        (14, "Tokens:\nbyte-level BPE"), (15, "Rotary\npositions"), (16, "The modern\ndecoder"),
    ]),
]

# (a, b): chapter b builds on chapter a.
BUILDS_ON = [
    (0, 1),
    (1, 2), (2, 3), (3, 4),
    (4, 5), (4, 6), (5, 6), (5, 7), (6, 7), (7, 8), (8, 9), (9, 10),
    (7, 11), (10, 12), (8, 12), (12, 13), (12, 14), (6, 15), (15, 16), (14, 16),
]

BOX_W, BOX_H = 3.8, 1.0
ROW = 1.3         # vertical distance between chapters of a part
CAPTION_LINE = 0.34  # height of one line of a part's caption
PAD = 0.18        # margin of a part's background around its boxes
GAP = 1.0         # horizontal space between columns, where the arrows from one part to the next run
# Sideways offsets: chapter 6 steps aside, so that 5 -> 7 runs past it (5 -> 6 is a short arrow); likewise
# chapter 13 steps aside for 12 -> 14, and chapter 15 for 14 -> 16.
STEP = 1.1
ASIDE = {5: STEP, 6: -STEP, 7: STEP, 8: STEP, 9: STEP, 10: STEP, 11: STEP, 12: STEP, 13: -STEP, 14: STEP, 15: -STEP,
         16: STEP}
COLOURS = ["#eeeeee", "#dbe9f6", "#dcefdc", "#f6e6d2"]
EDGES = ["#808080", "#4a7fb5", "#4f9a56", "#c08a3e"]
TITLE_PT, NUMBER_PT, CAPTION_PT = 8.0, 13, 8.3


def caption_lines(caption: str) -> list[str]:
    """A part's caption in short lines: "Part I", then its title wrapped to lines of even length."""
    lines = []
    for piece in caption.split(" — "):
        count = len(textwrap.wrap(piece, 22))
        width = min(w for w in range(1, 23) if len(textwrap.wrap(piece, w)) == count)
        lines += textwrap.wrap(piece, width)
    return lines


def caption_height(caption: str) -> float:
    """Room between the top of a part's background and the top of its first box."""
    return CAPTION_LINE * len(caption_lines(caption)) + 0.22


def positions() -> dict[int, tuple[float, float]]:
    """Centre of each chapter's box: columns left to right, chapters top to bottom in reading order."""
    centre: dict[int, tuple[float, float]] = {}
    columns = sorted({column for _, column, _ in PARTS})
    left = 0.0
    for column in columns:
        parts = [(caption, chapters) for caption, c, chapters in PARTS if c == column]
        asides = [ASIDE.get(n, 0.0) for _, chapters in parts for n, _ in chapters]
        x0 = left + BOX_W / 2 + PAD - min(asides)
        top = 0.0  # of the next part's background
        for caption, chapters in parts:
            first = top - caption_height(caption) - BOX_H / 2
            for row, (number, _) in enumerate(chapters):
                centre[number] = (x0 + ASIDE.get(number, 0.0), first - row * ROW)
            top = first - (len(chapters) - 1) * ROW - BOX_H / 2 - PAD - 2 * PAD
        left = x0 + max(asides) + BOX_W / 2 + PAD + GAP
    return centre


def part_of(number: int) -> int:
    return next(i for i, (_, _, chapters) in enumerate(PARTS) if any(n == number for n, _ in chapters))


def column_of(number: int) -> int:
    return next(c for _, c, chapters in PARTS if any(n == number for n, _ in chapters))


def arrow_path(a: int, b: int, centre: dict) -> list[tuple[float, float]]:
    """Corners of the arrow from chapter a to chapter b.

    In one column: straight down from the bottom of a to the top of b. From one column to the next:
    out of a's right side, up or down the gap in front of b's column, and into b's left side. Each
    such arrow has its own lane in the gap, so that no two run together: the higher an arrow
    reaches, the further left it runs, so that the arrows into the upper chapters pass over none of
    the others. Arrows into the same chapter enter it at different heights, the one from the higher
    chapter higher.
    """
    (xa, ya), (xb, yb) = centre[a], centre[b]
    if column_of(a) == column_of(b):
        # Straight down, in the middle of the stretch of x that the two boxes share; from one part
        # to the next one below it, near the right edge, clear of the lower part's caption.
        x = (max(xa, xb) - BOX_W / 2 + min(xa, xb) + BOX_W / 2) / 2
        if part_of(a) != part_of(b):
            x = min(xa, xb) + BOX_W / 2 - 0.3
        return [(x, ya - BOX_H / 2), (x, yb + BOX_H / 2)]
    if abs(ya - yb) < 1e-9:
        return [(xa + BOX_W / 2, ya), (xb - BOX_W / 2, yb)]
    column = column_of(b)
    in_column = [n for _, c, chapters in PARTS if c == column for n, _ in chapters]
    gap_right = min(centre[n][0] for n in in_column) - BOX_W / 2 - PAD
    lanes = [(p, q) for p, q in BUILDS_ON
             if column_of(q) == column and column_of(p) != column and abs(centre[p][1] - centre[q][1]) > 1e-9]
    lanes.sort(key=lambda e: (-max(centre[e[0]][1], centre[e[1]][1]), -min(centre[e[0]][1], centre[e[1]][1])))
    x = gap_right - GAP + GAP * (lanes.index((a, b)) + 1) / (len(lanes) + 1)
    into_b = [p for p, q in lanes if q == b]
    if len(into_b) > 1:
        yb += BOX_H / 4 * (1 - 2 * into_b.index(a) / (len(into_b) - 1))
    return [(xa + BOX_W / 2, ya), (x, ya), (x, yb), (xb - BOX_W / 2, yb)]


def draw(path: FilePath = OUTPUT) -> FilePath:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    from matplotlib.path import Path

    plt.rcParams.update({"svg.hashsalt": "tfmini-learning-path", "svg.fonttype": "none",
                         "font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans"]})
    centre = positions()
    right = max(x for x, _ in centre.values()) + BOX_W / 2 + PAD
    bottom = min(y for _, y in centre.values()) - BOX_H / 2 - PAD
    width = 9.0  # inches; the text sizes above are chosen for this width
    fig, ax = plt.subplots(figsize=(width, width * (-bottom + 0.1) / (right + 0.1)))
    ax.set_xlim(-0.05, right + 0.05)
    ax.set_ylim(bottom - 0.05, 0.05)
    ax.set_aspect("equal")
    ax.axis("off")

    for index, (caption, _, chapters) in enumerate(PARTS):
        xs = [centre[n][0] for n, _ in chapters]
        ys = [centre[n][1] for n, _ in chapters]
        left, right_edge = min(xs) - BOX_W / 2 - PAD, max(xs) + BOX_W / 2 + PAD
        low, top = min(ys) - BOX_H / 2 - PAD, max(ys) + BOX_H / 2 + caption_height(caption)
        ax.add_patch(FancyBboxPatch((left, low), right_edge - left, top - low,
                                    boxstyle="round,pad=0,rounding_size=0.15", facecolor=COLOURS[index],
                                    edgecolor="none", alpha=0.6, zorder=0))
        ax.text((left + right_edge) / 2, top - 0.1, "\n".join(caption_lines(caption)), ha="center", va="top", fontsize=CAPTION_PT,
                fontweight="bold", color=EDGES[index], linespacing=1.05, zorder=1)
        for number, title in chapters:
            x, y = centre[number]
            ax.add_patch(FancyBboxPatch((x - BOX_W / 2, y - BOX_H / 2), BOX_W, BOX_H,
                                        boxstyle="round,pad=0,rounding_size=0.1", facecolor="white",
                                        edgecolor=EDGES[index], linewidth=1.4, zorder=2))
            ax.text(x - BOX_W / 2 + 0.14, y, str(number), ha="left", va="center", fontsize=NUMBER_PT,
                    fontweight="bold", color=EDGES[index], zorder=3)
            ax.text(x - BOX_W / 2 + (0.98 if number >= 10 else 0.63), y, title, ha="left", va="center",
                    fontsize=TITLE_PT, color="#222222", linespacing=1.15, zorder=3)

    for a, b in BUILDS_ON:
        corners = arrow_path(a, b, centre)
        codes = [Path.MOVETO] + [Path.LINETO] * (len(corners) - 1)
        ax.add_patch(FancyArrowPatch(path=Path(corners, codes), arrowstyle="-|>", mutation_scale=12,
                                     linewidth=1.2, color="#555555", shrinkA=0, shrinkB=0,
                                     joinstyle="miter", zorder=1.5))

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", bbox_inches="tight", pad_inches=0.03,
                metadata={"Date": None, "Creator": None, "Contributor": None})
    plt.close(fig)
    return path


def main() -> int:
    out = draw()
    print(f"learning path: wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
