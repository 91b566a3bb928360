"""tfmini.notebook: ``markdown_table`` writes a GitHub-style table that shows every cell's text exactly,
aligns numbers to the right and rejects rows that do not fit the headers; ``show_table`` displays it as a
``text/markdown`` output (or prints it where IPython is missing)."""
from __future__ import annotations

import builtins
import sys

import pytest

from tfmini.notebook import markdown_table, show_table


def test_header_rule_and_one_line_per_row():
    text = markdown_table([["dot", "2.10"], ["additive", "6.29"]], ["score", "MFLOP"])
    assert text.splitlines() == [
        "| score | MFLOP |",
        "| :--- | ---: |",
        "| dot | 2.10 |",
        "| additive | 6.29 |",
    ]


def test_cells_are_written_with_str_so_the_caller_chooses_the_precision():
    text = markdown_table([[1024, f"{36.6321:.3f}", f"{0.9137:.0%}", True]], ["T", "ms", "share", "ok"])
    assert text.splitlines()[-1] == "| 1024 | 36.632 | 91% | True |"


def test_numeric_columns_are_right_aligned_and_the_others_left():
    rows = [["x 1", "1,048,576", "-0.41", "3.6x", "1e-06", "never"], ["x 10", "576", "+2", "12x", "7", "87"]]
    rule = markdown_table(rows, list("abcdef")).splitlines()[1]
    assert rule == "| :--- | ---: | ---: | ---: | ---: | :--- |"
    # booleans are words, not numbers
    assert markdown_table([[False], [True]], ["bias"]).splitlines()[1] == "| :--- |"


def test_explicit_alignment():
    assert markdown_table([["a", "b", "c"]], ["x", "y", "z"], align="rcl").splitlines()[1] == (
        "| ---: | :---: | :--- |"
    )


def test_markdown_syntax_in_cells_is_escaped():
    text = markdown_table([["max |e|", "<mask> a_b *c* `d` $x$ [e] ~f~ \\"]], ["query", "guess"])
    assert text.splitlines()[-1] == (
        "| max \\|e\\| | \\<mask\\> a\\_b \\*c\\* \\`d\\` \\$x\\$ \\[e\\] \\~f\\~ \\\\ |"
    )


def test_title_is_bold_above_the_table():
    lines = markdown_table([["1"]], ["n"], title="the <mask> result").splitlines()
    assert lines[:3] == ["**the \\<mask\\> result**", "", "| n |"]


def test_empty_rows_give_only_the_header():
    assert markdown_table([], ["a", "b"]).splitlines() == ["| a | b |", "| :--- | :--- |"]


@pytest.mark.parametrize("rows, headers, kwargs, message", [
    ([["a", "b", "c"]], ["x", "y"], {}, r"rows\[0\] has 3 cells but there are 2 headers"),
    ([["a", "b"], ["c"]], ["x", "y"], {}, r"rows\[1\] has 1 cells"),
    (["ab"], ["x", "y"], {}, r"rows\[0\]: expected a sequence of 2 cells, got the string 'ab'"),
    ([], [], {}, r"headers: a table needs at least one column"),
    ([["a"]], "xy", {}, r"headers: expected a sequence of column headers"),
    ([["a", "b"]], ["x", "y"], {"align": "l"}, r"align: expected one of 'l', 'r', 'c' per column \(2 letters\)"),
    ([["a", "b"]], ["x", "y"], {"align": "lx"}, r"align: "),
    ([["a\nb"]], ["x"], {}, r"a table cell must be one line"),
    ([["a"]], ["x"], {"title": "two\nlines"}, r"a table cell must be one line"),
])
def test_bad_input_is_rejected_with_a_clear_message(rows, headers, kwargs, message):
    with pytest.raises(ValueError, match=message):
        markdown_table(rows, headers, **kwargs)
    with pytest.raises(ValueError, match=message):
        show_table(rows, headers, **kwargs)


def test_show_table_displays_markdown():
    display_module = pytest.importorskip("IPython.display")
    shown = []
    original = display_module.display
    display_module.display = shown.append
    try:
        assert show_table([["dot", "2.10"]], ["score", "MFLOP"], title="cost") is None
    finally:
        display_module.display = original
    assert len(shown) == 1 and isinstance(shown[0], display_module.Markdown)
    assert shown[0].data == markdown_table([["dot", "2.10"]], ["score", "MFLOP"], title="cost")
    assert shown[0]._repr_markdown_() == shown[0].data


def test_show_table_prints_the_markdown_without_ipython(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_ipython(name, *args, **kwargs):
        if name == "IPython" or name.startswith("IPython."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ipython)
    monkeypatch.delitem(sys.modules, "IPython.display", raising=False)
    show_table([["a", "1"]], ["x", "n"])
    assert capsys.readouterr().out == markdown_table([["a", "1"]], ["x", "n"]) + "\n"


def test_threads_restores_the_number_of_threads():
    import torch
    from tfmini.notebook import threads

    before = torch.get_num_threads()
    with threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    try:
        with threads(1):
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "1"])
def test_threads_rejects_what_is_not_a_positive_integer(bad):
    from tfmini.notebook import threads

    with pytest.raises(ValueError, match="n: expected a positive number of threads"):
        with threads(bad):
            pass


# -- full_run and study: quick by default, every study computed when TFMINI_FULL=1 ---------------------

def test_full_run_reads_the_environment(monkeypatch):
    from tfmini.notebook import full_run
    monkeypatch.delenv("TFMINI_FULL", raising=False)
    assert full_run() is False
    monkeypatch.setenv("TFMINI_FULL", "1")
    assert full_run() is True
    monkeypatch.setenv("TFMINI_FULL", "0")
    assert full_run() is False
    monkeypatch.setenv("TFMINI_FULL", "yes")
    with pytest.raises(ValueError, match="TFMINI_FULL: expected '0' or '1', got 'yes'"):
        full_run()


def test_study_records_when_full_and_reads_the_recording_otherwise(monkeypatch, tmp_path, capsys):
    import tfmini.notebook as nb
    monkeypatch.setattr(nb, "RECORDED_DIR", tmp_path)
    calls = []

    def compute():
        calls.append(1)
        return {"seeds": (0, 1, 2), "accuracy": [0.5, 0.25, 1.0]}

    first = nb.study("ch99_demo", compute, full=True)
    assert calls == [1] and "computed in this run" in capsys.readouterr().out
    assert (tmp_path / "ch99_demo.json").exists()
    second = nb.study("ch99_demo", compute, full=False)
    assert calls == [1], "a default run must not compute the study"
    assert "recorded by the book's execution" in capsys.readouterr().out
    assert first == second == {"seeds": [0, 1, 2], "accuracy": [0.5, 0.25, 1.0]}
    monkeypatch.setenv("TFMINI_FULL", "0")
    assert nb.study("ch99_demo", compute) == first and calls == [1]


def test_study_rejects_bad_input(monkeypatch, tmp_path):
    import tfmini.notebook as nb
    monkeypatch.setattr(nb, "RECORDED_DIR", tmp_path)
    with pytest.raises(ValueError, match="name: expected lower-case"):
        nb.study("Chapter 9", lambda: 1, full=True)
    with pytest.raises(ValueError, match="compute: expected a function"):
        nb.study("ch99_x", 3, full=True)
    with pytest.raises(ValueError, match="compute: expected JSON-serialisable"):
        nb.study("ch99_x", lambda: {"t": object()}, full=True)
    with pytest.raises(ValueError, match="no recorded results for study 'ch99_missing'"):
        nb.study("ch99_missing", lambda: 1, full=False)


def test_every_recording_is_json_and_named_after_a_chapter():
    from tfmini.notebook import RECORDED_DIR
    import json
    for path in sorted(RECORDED_DIR.glob("*.json")):
        assert path.stem[:2] == "ch" and path.stem[2:4].isdigit(), path.name
        json.loads(path.read_text())


def test_every_study_in_a_chapter_has_its_recording_and_every_recording_a_study():
    """A reader's default run reads the recordings: one missing fails there; one no chapter uses is stale."""
    import re
    from pathlib import Path
    from tfmini.notebook import RECORDED_DIR
    root = Path(__file__).resolve().parent.parent
    used = set()
    for path in sorted((root / "chapters").glob("*.ipynb")):
        used |= set(re.findall(r'study\(\\?["\'](ch\d\d_[a-z0-9_]+)\\?["\']', path.read_text()))
    recorded = {p.stem for p in RECORDED_DIR.glob("*.json")}
    assert sorted(used - recorded) == [], "studies without a recording: run bash scripts/execute.sh on their chapters"
    assert sorted(recorded - used) == [], "recordings that no chapter reads: delete them"
