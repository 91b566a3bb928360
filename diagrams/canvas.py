"""Drawing helpers shared by the diagrams: boxes for modules, arrows for tensors, grids for masks.

A :class:`Canvas` is a matplotlib figure measured in inches, with the origin at the bottom left and a
white rounded card behind everything, so that a diagram stays legible on a dark page. Text is kept as
SVG text (``svg.fonttype: none``), which keeps the files small and lets tests read the labels.
:func:`save` writes the SVG deterministically: fixed ids, no date, no creator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402
from matplotlib.path import Path as MPath  # noqa: E402

RC = {
    "svg.hashsalt": "tfmini-diagrams",  # ids derived from this salt, not from a random one
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.monospace": ["DejaVu Sans Mono"],
}
METADATA = {"Date": None, "Creator": None, "Contributor": None}

INK, MUTED, CARD_EDGE = "#222222", "#5c5c5c", "#c8ccd0"
# (fill, edge) of each kind of box; the same kind has the same colour in every diagram.
KINDS = {
    "attention": ("#fde7cf", "#c0772b"),
    "ffn": ("#dbe9f6", "#4a7fb5"),
    "norm": ("#fff3bf", "#a8861a"),
    "embed": ("#dcefdc", "#4f9a56"),
    "rnn": ("#ece3f5", "#7b5aa6"),
    "tensor": ("#f3f3f3", "#808080"),
    "output": ("#f6dede", "#b55454"),
    "plain": ("#ffffff", "#555555"),
}
FONT = 9.5  # points
SHAPE_FONT = 8.5


@dataclass(frozen=True)
class Box:
    """Where a box was drawn: centre and size in inches."""

    x: float
    y: float
    w: float
    h: float

    @property
    def top(self) -> tuple[float, float]:
        return (self.x, self.y + self.h / 2)

    @property
    def bottom(self) -> tuple[float, float]:
        return (self.x, self.y - self.h / 2)

    @property
    def left(self) -> tuple[float, float]:
        return (self.x - self.w / 2, self.y)

    @property
    def right(self) -> tuple[float, float]:
        return (self.x + self.w / 2, self.y)


class Canvas:
    """A figure ``width`` x ``height`` inches with one axes in inch coordinates and a white card."""

    def __init__(self, width: float, height: float):
        with plt.rc_context(RC):
            self.fig = plt.figure(figsize=(width, height))
        self.fig.patch.set_alpha(0.0)
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.axis("off")
        self.width, self.height = width, height
        self.ax.add_patch(FancyBboxPatch((0.03, 0.03), width - 0.06, height - 0.06,
                                         boxstyle="round,pad=0,rounding_size=0.12", facecolor="white",
                                         edgecolor=CARD_EDGE, linewidth=0.8, zorder=0))

    def text(self, x: float, y: float, s: str, size: float = FONT, color: str = INK, ha: str = "center",
             va: str = "center", weight: str = "normal", style: str = "normal", mono: bool = False,
             zorder: float = 5, **kwargs) -> None:
        self.ax.text(x, y, s, fontsize=size, color=color, ha=ha, va=va, fontweight=weight, fontstyle=style,
                     family="monospace" if mono else "sans-serif", zorder=zorder, linespacing=1.2, **kwargs)

    def title(self, s: str) -> None:
        """A bold line at the top left of the card."""
        self.text(0.2, self.height - 0.22, s, size=FONT + 1, weight="bold", ha="left", va="center")

    def shape(self, x: float, y: float, shape: tuple, name: str = "", ha: str = "center", va: str = "center",
              color: str = MUTED, size: float = SHAPE_FONT) -> None:
        """A tensor's shape, written as Python prints a tuple: ``(2, 5, 12)``, optionally after its name."""
        self.text(x, y, f"{name} {tuple(shape)}".strip(), size=size, color=color, ha=ha, va=va, mono=True)

    def box(self, x: float, y: float, w: float, h: float, label: str = "", kind: str = "plain",
            size: float = FONT, weight: str = "normal", rounding: float = 0.08, dashed: bool = False,
            zorder: float = 2) -> Box:
        fill, edge = KINDS[kind]
        self.ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h,
                                         boxstyle=f"round,pad=0,rounding_size={rounding}", facecolor=fill,
                                         edgecolor=edge, linewidth=1.2, linestyle="--" if dashed else "-",
                                         zorder=zorder))
        if label:
            self.text(x, y, label, size=size, weight=weight, zorder=zorder + 1)
        return Box(x, y, w, h)

    def frame(self, x0: float, y0: float, x1: float, y1: float, label: str = "", color: str = "#9aa0a6",
              fill: str = "none", label_pos: str = "top-left") -> None:
        """A dashed frame around a group of boxes, such as a layer repeated N times."""
        self.ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=0.1",
                                         facecolor=fill, edgecolor=color, linewidth=1.0, linestyle="--", zorder=1))
        if label:
            if label_pos == "top-left":
                self.text(x0 + 0.08, y1 - 0.06, label, size=FONT - 0.5, color=MUTED, ha="left", va="top")
            elif label_pos == "right":
                self.text(x1 + 0.08, (y0 + y1) / 2, label, size=FONT, color=INK, ha="left", va="center",
                          weight="bold")
            else:
                self.text(x1 - 0.08, y1 - 0.06, label, size=FONT - 0.5, color=MUTED, ha="right", va="top")

    def arrow(self, start: tuple[float, float], end: tuple[float, float], color: str = "#444444",
              width: float = 1.2, corners: Sequence[tuple[float, float]] = (), dashed: bool = False,
              head: bool = True, zorder: float = 3) -> None:
        """An arrow from ``start`` to ``end``, through ``corners`` if given (straight segments)."""
        points = [start, *corners, end]
        path = MPath(points, [MPath.MOVETO] + [MPath.LINETO] * (len(points) - 1))
        self.ax.add_patch(FancyArrowPatch(path=path, arrowstyle="-|>" if head else "-", mutation_scale=10,
                                          linewidth=width, color=color, shrinkA=0, shrinkB=0,
                                          linestyle="--" if dashed else "-", joinstyle="miter", zorder=zorder))

    def plus(self, x: float, y: float, r: float = 0.11) -> Box:
        """The residual addition: a circle with a plus."""
        self.ax.add_patch(Circle((x, y), r, facecolor="white", edgecolor="#444444", linewidth=1.1, zorder=4))
        self.text(x, y, "+", size=FONT + 1, weight="bold", zorder=5)
        return Box(x, y, 2 * r, 2 * r)

    def circle(self, x: float, y: float, r: float, color: str = "#888888", fill: str = "none",
               width: float = 1.0, zorder: float = 2) -> None:
        self.ax.add_patch(Circle((x, y), r, facecolor=fill, edgecolor=color, linewidth=width, zorder=zorder))

    def line(self, xs: Sequence[float], ys: Sequence[float], color: str = "#444444", width: float = 1.0,
             dashed: bool = False, zorder: float = 2) -> None:
        self.ax.plot(xs, ys, color=color, linewidth=width, linestyle="--" if dashed else "-", zorder=zorder,
                     solid_capstyle="round")

    def rect(self, x0: float, y0: float, w: float, h: float, fill: str, edge: str = "white", width: float = 0.8,
             zorder: float = 2) -> None:
        self.ax.add_patch(Rectangle((x0, y0), w, h, facecolor=fill, edgecolor=edge, linewidth=width, zorder=zorder))

    def grid(self, x0: float, y_top: float, cells: Sequence[Sequence[bool]], cell: float,
             on: str = "#4a7fb5", off: str = "#eeeeee", rows: Sequence[str] = (), cols: Sequence[str] = (),
             label_size: float = 7.5) -> tuple[float, float, float, float]:
        """A bool matrix as coloured squares, row 0 at the top; returns its (left, bottom, right, top)."""
        n_rows, n_cols = len(cells), len(cells[0])
        for i, row in enumerate(cells):
            for j, value in enumerate(row):
                self.rect(x0 + j * cell, y_top - (i + 1) * cell, cell, cell, on if value else off)
        for i, name in enumerate(rows):
            self.text(x0 - 0.06, y_top - (i + 0.5) * cell, name, size=label_size, ha="right", color=MUTED)
        for j, name in enumerate(cols):
            self.text(x0 + (j + 0.5) * cell, y_top + 0.06, name, size=label_size, ha="left", va="bottom",
                      color=MUTED, rotation=60, rotation_mode="anchor")
        return x0, y_top - n_rows * cell, x0 + n_cols * cell, y_top


def save(canvas: Canvas, path: Path) -> Path:
    """Write the canvas as SVG, byte for byte the same on every run, and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with plt.rc_context(RC):
        canvas.fig.savefig(path, format="svg", metadata=METADATA, facecolor="none")
    plt.close(canvas.fig)
    return path
