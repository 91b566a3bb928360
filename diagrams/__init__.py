"""The course's diagrams, drawn from source: ``python -m diagrams`` writes ``images/diagrams/*.svg``.

One diagram, at least, for each piece a chapter builds. Each is a function that draws on a
:class:`~diagrams.canvas.Canvas`; the tensor shapes it prints come from :mod:`diagrams.shapes`, which
runs tfmini on the configuration read from the chapter's own code. The SVG files are deterministic,
so regenerating them on an unchanged repository changes no byte (tests/test_diagrams.py checks it).
The chapters include them with a MyST ``{figure}`` directive, with alt text and a caption.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import modern, recurrent, scale, transformer
from .canvas import Canvas, save

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "images" / "diagrams"


@dataclass(frozen=True)
class Diagram:
    """A diagram: its file name (without .svg), the chapter that shows it, and the function that draws it."""

    name: str
    chapter: int
    draw: Callable[[], Canvas]

    @property
    def file(self) -> str:
        return f"{self.name}.svg"


DIAGRAMS = [
    Diagram("quick_tour_model", 0, transformer.quick_tour_model),
    Diagram("rnn_bottleneck", 1, recurrent.rnn_bottleneck),
    Diagram("bahdanau_step", 2, recurrent.bahdanau_step),
    Diagram("soft_lookup", 3, recurrent.soft_lookup),
    Diagram("scaled_dot_product", 4, transformer.scaled_dot_product),
    Diagram("multi_head_split", 5, transformer.multi_head_split),
    Diagram("sinusoid_pairs", 6, transformer.sinusoid_pairs),
    Diagram("block_post_pre_ln", 7, transformer.block_post_pre_ln),
    Diagram("masks", 8, transformer.masks),
    Diagram("decoder_layer", 8, transformer.decoder_layer),
    Diagram("full_transformer", 9, transformer.full_transformer),
    Diagram("kv_cache", 10, transformer.kv_cache),
    Diagram("beam_search", 10, scale.beam_search),
    Diagram("sequential_vs_parallel", 11, scale.sequential_vs_parallel),
    Diagram("families", 12, scale.families),
    Diagram("representations_checkpoints", 13, scale.representations_checkpoints),
    Diagram("bpe_merges", 14, scale.bpe_merges),
    Diagram("rope_rotation", 15, modern.rope_rotation),
    Diagram("modern_block", 16, modern.modern_block),
]


def build(out: Path = OUTPUT, only: list[str] | None = None) -> list[Path]:
    """Draw the diagrams (all, or those named in ``only``) into ``out``; returns the files written."""
    written = []
    for diagram in DIAGRAMS:
        if only is None or diagram.name in only:
            written.append(save(diagram.draw(), out / diagram.file))
    return written
