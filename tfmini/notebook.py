"""Small helpers for the course's notebooks.

:func:`glue` stores a value computed by the code so that the book's prose can quote it
(myst-nb's ``glue``); where myst-nb is not installed, as on Colab, it just shows the value.
:func:`threads` runs a block on a given number of CPU threads and restores the number afterwards.
:func:`full_run` and :func:`study` give a notebook a quick default run: a study too slow for a reader's
default run is computed when the environment variable ``TFMINI_FULL`` is ``1`` (the book's execute
command and the test command set it) and otherwise shown as the book's own execution recorded it.
:func:`show_table` shows rows of results as a real table (a markdown output, which the book's site,
Jupyter and Colab render), so that a wide table needs no horizontal scroll bar the way a printed one
does; :func:`markdown_table` builds its markdown.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

__all__ = ["full_run", "glue", "markdown_table", "recorded_path", "show_table", "study", "threads"]

FULL_ENV = "TFMINI_FULL"
# Where study() keeps what the book's execution computed: package data, installed with tfmini.
RECORDED_DIR = Path(__file__).resolve().parent / "recorded"
_STUDY_NAME = re.compile(r"[a-z0-9][a-z0-9_]*")

# A cell that reads as a number ("3", "-0.41", "1,048,576", "1e-06", "96%", "3.6x") is right-aligned.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?\s*(?:%|x)?")
# Characters that markdown (and MyST's dollar math) would read as syntax; escaped with a backslash.
_SPECIAL = re.compile(r"([\\`*_\[\]<>|$~])")


def glue(name: str, value: Any, display: bool = False) -> None:
    """Record ``value`` under ``name`` for ``{glue:text}`name``` in the book's text.

    Args:
        name: the key the text refers to.
        value: the value to show (its text form is quoted).
        display: also show the value in the cell's output.
    """
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        if display:
            from IPython.display import display as show
            show(value)
        return
    myst_glue(name, value, display=display)


def full_run() -> bool:
    """Whether this run computes every study: ``True`` when the environment variable ``TFMINI_FULL`` is ``1``.

    The book's execute command (``bash scripts/execute.sh``) and the test command set it; a reader's
    run (Colab, a laptop) leaves it unset and gets the quick default run. Set it before starting
    Jupyter, or in the notebook before the set-up cell: ``os.environ["TFMINI_FULL"] = "1"``.

    Returns:
        ``True`` for a full run, ``False`` for a reader's default run.

    Raises:
        ValueError: if ``TFMINI_FULL`` is set to anything but ``0`` or ``1``.
    """
    value = os.environ.get(FULL_ENV, "0").strip() or "0"
    if value not in ("0", "1"):
        raise ValueError(f"{FULL_ENV}: expected '0' or '1', got {value!r}")
    return value == "1"


def recorded_path(name: str) -> Path:
    """The file in which :func:`study` keeps the recorded results of the study ``name``.

    Args:
        name: the study's name, e.g. ``"ch09_recipe"``.

    Returns:
        ``tfmini/recorded/<name>.json`` inside the installed package.

    Raises:
        ValueError: if ``name`` is not lower-case letters, digits and underscores.
    """
    if not isinstance(name, str) or not _STUDY_NAME.fullmatch(name):
        raise ValueError(f"name: expected lower-case letters, digits and underscores (like 'ch09_recipe'), got {name!r}")
    return RECORDED_DIR / f"{name}.json"


def study(name: str, compute: Callable[[], Any], full: bool | None = None) -> Any:
    """The results of a study that is too slow for a reader's default run: computed, or as recorded.

    With ``full`` (default: :func:`full_run`), ``compute()`` runs and its results are written to
    :func:`recorded_path` (``tfmini/recorded/<name>.json``, shipped with the package), so that the
    book's own execution records them. Without it, the recorded results are read back and a line says
    that they are recorded and which command recomputes them. Either way the caller gets the same
    JSON value (a tuple comes back as a list, a dict's keys as strings), so the cells after this one
    print the same thing in both runs.

    Args:
        name: the study's name, e.g. ``"ch09_recipe"`` (lower case, digits, underscores).
        compute: a function of no arguments that runs the study and returns JSON-serialisable results
            (numbers, strings, lists, dicts with string keys).
        full: compute now (``True``) or read the recording (``False``); ``None`` asks :func:`full_run`.

    Returns:
        the results, after a round trip through JSON.

    Raises:
        ValueError: if ``name`` is malformed, ``compute`` is not callable or returns something JSON
            cannot hold, or there is no recording to read and ``full`` is off.
    """
    path = recorded_path(name)
    if not callable(compute):
        raise ValueError(f"compute: expected a function of no arguments, got {type(compute).__name__}")
    if full is None:
        full = full_run()
    if full:
        result = compute()
        try:
            text = json.dumps(result, indent=1, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise ValueError(f"compute: expected JSON-serialisable results (numbers, strings, lists, dicts), "
                             f"got {type(result).__name__}: {err}") from None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")
        except OSError:  # a read-only install: the results are still returned, just not recorded
            pass
        print(f"{name}: computed in this run ({FULL_ENV}=1).")
        return json.loads(text)
    if not path.exists():
        raise ValueError(f"name: no recorded results for study {name!r} at {path}; run with {FULL_ENV}=1 "
                         f"to compute them")
    print(f"{name}: recorded by the book's execution (bash scripts/execute.sh); "
          f"set {FULL_ENV}=1 to recompute it.")
    return json.loads(path.read_text())


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the ``with`` block on ``n`` of PyTorch's CPU threads, then restore the previous number.

    A cell that trains a tiny model on one thread (threads that wait for each other cost more than they
    save there) leaves the rest of the session as it found it, even when the block raises.

    Args:
        n: the number of threads inside the block, at least 1.

    Yields:
        None, once: the ``with`` block runs on ``n`` threads.

    Raises:
        ValueError: if ``n`` is not a positive integer.
    """
    import torch

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive number of threads, got {n!r}")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    text = str(value).strip()
    return bool(text) and any(c.isdigit() for c in text) and _NUMBER.fullmatch(text) is not None


def _escape(value: Any) -> str:
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError(f"a table cell must be one line, got {text!r}")
    return _SPECIAL.sub(r"\\\1", text)


def markdown_table(rows: Sequence[Sequence[Any]], headers: Sequence[Any], title: str | None = None,
                   align: str | None = None) -> str:
    """The markdown (GitHub-style pipe table) of ``rows`` under ``headers``.

    Cells are written with ``str``, so format numbers before passing them (``f"{x:.3f}"``) to choose
    their precision. Characters that markdown would read as syntax (``|``, ``*``, ``_``, ``<``, ``$``,
    ...) are escaped, so every cell shows exactly its text.

    Args:
        rows: the rows of the table, each a sequence with one value per header.
        headers: the column headers.
        title: an optional caption, written in bold above the table.
        align: one letter per column, ``"l"`` (left), ``"r"`` (right) or ``"c"`` (centre). By default a
            column whose cells all read as numbers (``3``, ``-0.41``, ``1,048,576``, ``96%``, ``3.6x``) is
            right-aligned, any other column left-aligned.

    Returns:
        the markdown text. With a title, it starts with the title in bold and a blank line; then
        come the header row, the alignment row and one line per row.

    Raises:
        ValueError: if ``headers`` is empty, a row does not have one value per header, ``align`` has the
            wrong length or letters, or a cell, header or the title spans more than one line.
    """
    if isinstance(headers, str):
        raise ValueError(f"headers: expected a sequence of column headers, got the string {headers!r}")
    headers = list(headers)
    if not headers:
        raise ValueError("headers: a table needs at least one column")
    rows = [list(row) if not isinstance(row, str) else row for row in rows]
    for i, row in enumerate(rows):
        if isinstance(row, str):
            raise ValueError(f"rows[{i}]: expected a sequence of {len(headers)} cells, got the string {row!r}")
        if len(row) != len(headers):
            raise ValueError(f"rows[{i}] has {len(row)} cells but there are {len(headers)} headers {headers}")
    if align is None:
        align = "".join("r" if rows and all(_is_number(row[j]) for row in rows) else "l"
                        for j in range(len(headers)))
    if len(align) != len(headers) or set(align) - set("lrc"):
        raise ValueError(f"align: expected one of 'l', 'r', 'c' per column ({len(headers)} letters), got {align!r}")
    rule = {"l": ":---", "r": "---:", "c": ":---:"}

    def line(cells):
        return "| " + " | ".join(_escape(c) for c in cells) + " |"

    lines = [line(headers), "| " + " | ".join(rule[a] for a in align) + " |", *(line(row) for row in rows)]
    if title is not None:
        lines = [f"**{_escape(title)}**", ""] + lines
    return "\n".join(lines)


def show_table(rows: Sequence[Sequence[Any]], headers: Sequence[Any], title: str | None = None,
               align: str | None = None) -> None:
    """Show ``rows`` as a table in the cell's output, instead of printing aligned columns.

    The table is a markdown output (:func:`markdown_table`), which the book's site, Jupyter and Colab
    render as a table that fits the page. Without IPython (a plain Python script) the markdown is printed.

    Args:
        rows: the rows of the table, each a sequence with one value per header; format numbers first
            (``f"{x:.3f}"``), cells are written with ``str``.
        headers: the column headers.
        title: an optional caption, written in bold above the table.
        align: one letter per column, ``"l"``, ``"r"`` or ``"c"``; by default numeric columns are
            right-aligned and the others left-aligned.

    Returns:
        None. The table is displayed as the cell's output.

    Raises:
        ValueError: as :func:`markdown_table`, for rows that do not match the headers or a bad ``align``.
    """
    text = markdown_table(rows, headers, title=title, align=align)
    try:
        from IPython.display import Markdown, display
    except ImportError:
        print(text)
        return
    display(Markdown(text))


def _in_kernel() -> bool:
    """True inside a running Jupyter kernel (ipykernel merely being imported, e.g. by a pytest plugin, is not enough)."""
    if "ipykernel" not in sys.modules:
        return False
    from IPython import get_ipython
    return getattr(get_ipython(), "kernel", None) is not None


class _Progress:
    """A live one-line status: updated in place in a notebook and erased at the end, so a
    notebook's stored output never holds text that changes from run to run."""

    def __init__(self, enabled: bool):
        self.handle, self.enabled = None, enabled
        if enabled and _in_kernel():
            from IPython.display import display
            self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def show(self, text: str) -> None:
        if not self.enabled:
            return
        if self.handle is not None:
            self.handle.update({"text/plain": text}, raw=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.update({"text/plain": ""}, raw=True)
