"""The "Your turn" cells (scripts/your_turn.py): the book's solution passes its check, the Colab copy gets
the stub, whose recorded output is what the stub prints, and every chapter has its cell."""
from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import your_turn  # noqa: E402

from tfmini import exercises  # noqa: E402


def test_every_chapter_names_known_exercises_and_every_exercise_is_asked_somewhere():
    chapters = sorted(p.name[:2] for p in (ROOT / "chapters").glob("*.ipynb"))
    assert sorted(your_turn.EXERCISES) == chapters
    asked = {name for names in your_turn.EXERCISES.values() for name in names}
    assert asked == set(exercises.names())


@pytest.mark.parametrize("names", sorted({tuple(v) for v in your_turn.EXERCISES.values()}))
def test_the_books_solution_passes_and_the_stub_says_not_attempted(names):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(your_turn.solution_source(list(names)), "<solution>", "exec"), {})
    assert out.getvalue().count("Correct - ") == len(names), out.getvalue()
    printed = your_turn.stub_outputs(list(names))[0]["text"]
    assert printed.count("not attempted yet") == len(names)


def test_colab_cell_swaps_the_solution_for_the_stub_and_keeps_other_cells():
    names = ["rms_norm", "swiglu"]
    cell = nbformat.v4.new_code_cell(your_turn.solution_source(names))
    cell.metadata = {"tags": ["hide-cell"], "tfmini": {"exercise": names}}
    your_turn.colab_cell(cell)
    assert "raise NotImplementedError" in cell.source and "check('swiglu', my_swiglu)" in cell.source and "def my_rms_norm(" in cell.source
    assert "tags" not in cell.metadata
    assert "not attempted yet" in cell.outputs[0]["text"]
    assert cell.outputs[1]["data"]["text/plain"] == "False"  # check's value, as Jupyter shows the last line
    other = nbformat.v4.new_code_cell("x = 1")
    your_turn.colab_cell(other)
    assert other.source == "x = 1"


def test_insert_adds_the_cells_once_before_the_questions(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 3. T"), nbformat.v4.new_markdown_cell("## Check your understanding"),
                nbformat.v4.new_markdown_cell("## Summary")]
    path = tmp_path / "03_x.ipynb"
    nbformat.write(nb, path)
    assert your_turn.insert(path) is True and your_turn.insert(path) is False
    cells = nbformat.read(path, as_version=4).cells
    assert cells[1].source.startswith(":::{admonition} Your turn: write `my_masked_softmax(scores, mask)") and your_turn.exercise_names(cells[2]) == ["masked_softmax"]
    assert cells[3].source == "## Check your understanding"
