"""How long each chapter takes to execute, kept as a table in intro.md.

    python scripts/runtimes.py            # print the table as intro.md has it
    python scripts/runtimes.py --check    # exit 1 unless the table has one row per chapter of _toc.yml

Two columns. "Full run": the execute command (scripts/execute.py, every study computed,
``TFMINI_FULL=1``) times every notebook it runs, from kernel start to the last cell, and calls
:func:`record` to write those seconds into intro.md's table. "Default run": a reader's quick run
(``TFMINI_FULL`` unset, slow studies shown as recorded), timed by ``python scripts/colab_run.py --record``
as Colab runs it: alone, from an empty checkpoint cache, the setup cell's install included, one
thread per kernel with ``--jobs 2``; it calls :func:`record` with ``column="default"``. Rows of
chapters a run did not time keep their last value. No notebook measures or asserts its own run time: a slow machine
or a reader who pauses between cells changes the clock, never a result. In intro.md the table follows
the MyST comment line ``% chapter runtimes: ...`` (MARKER); tests/test_repo.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTRO = ROOT / "intro.md"
MARKER = "% chapter runtimes: the table below is written by the execute command (scripts/execute.py)"
ROW = re.compile(r"^\| \[(?P<title>.+)\]\(chapters/(?P<file>[^)]+\.ipynb)\) \| (?P<seconds>\d+) s \| (?P<default>\d+ s|–) \|$")
TITLE = re.compile(r"^#\s+(.+?)\s*$", re.MULTILINE)


def title(path: Path) -> str:
    """The chapter's title: the first level-1 heading of its notebook."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            found = TITLE.search("".join(cell["source"]))
            if found:
                return found.group(1)
    return path.stem


def toc_chapters() -> list[Path]:
    """The chapter notebooks that _toc.yml lists (those that are part of the book), in file order."""
    listed = set(re.findall(r"^\s*-?\s*file:\s*(chapters/\S+?)(?:\.ipynb)?\s*$",
                            (ROOT / "_toc.yml").read_text(encoding="utf-8"), re.MULTILINE))
    return [p for p in sorted((ROOT / "chapters").glob("*.ipynb")) if f"chapters/{p.stem}" in listed]


def _table_span(lines: list[str]) -> tuple[int, int]:
    try:
        start = lines.index(MARKER) + 1
    except ValueError:
        raise ValueError(f"intro.md has no line {MARKER!r} to put the table after") from None
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def recorded(text: str | None = None, column: str = "full") -> dict[str, int]:
    """Seconds per notebook file name, as intro.md's table has them (``column``: "full" or "default";
    a chapter whose default run was not timed yet is left out of the latter)."""
    if column not in ("full", "default"):
        raise ValueError(f"column: expected 'full' or 'default', got {column!r}")
    lines = (INTRO.read_text(encoding="utf-8") if text is None else text).split("\n")
    start, end = _table_span(lines)
    rows = [m for m in map(ROW.match, lines[start:end]) if m]
    if column == "full":
        return {m["file"]: int(m["seconds"]) for m in rows}
    return {m["file"]: int(m["default"][:-2]) for m in rows if m["default"] != "–"}


def _minutes(total: int) -> str:
    return f"{total // 60} min {total % 60:02d} s"


def table(seconds: dict[str, int], default: dict[str, int] | None = None) -> str:
    """The Markdown table: one row per chapter of _toc.yml (full run, default run), then the totals."""
    default = default or {}
    rows = ["| Chapter | Full run | Default run |", "|---|---:|---:|"]
    for path in toc_chapters():
        quick = f"{default[path.name]} s" if path.name in default else "–"
        rows.append(f"| [{title(path)}](chapters/{path.name}) | {seconds[path.name]} s | {quick} |")
    total = sum(seconds[p.name] for p in toc_chapters())
    quick = (f"**{_minutes(sum(default[p.name] for p in toc_chapters()))}**"
             if all(p.name in default for p in toc_chapters()) else "–")
    rows.append(f"| **All {len(toc_chapters())} chapters** | **{_minutes(total)}** | {quick} |")
    return "\n".join(rows)


def record(measured: dict[str, float], column: str = "full") -> None:
    """Write the measured seconds of the given notebooks (by file name) into intro.md's table, in the
    "Full run" column (the execute command) or the "Default run" column (``colab_run.py --record``)."""
    text = INTRO.read_text(encoding="utf-8")
    seconds, default = recorded(text), recorded(text, "default")
    (seconds if column == "full" else default).update({name: round(s) for name, s in measured.items()})
    missing = [p.name for p in toc_chapters() if p.name not in seconds]
    if missing:
        raise ValueError(f"no run time recorded yet for {missing}: execute them (scripts/execute.sh)")
    lines = text.split("\n")
    start, end = _table_span(lines)
    INTRO.write_text("\n".join(lines[:start] + table(seconds, default).split("\n") + lines[end:]), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail unless every chapter has a row")
    args = parser.parse_args(argv)
    text = INTRO.read_text(encoding="utf-8")
    seconds = recorded(text)
    expected = [p.name for p in toc_chapters()]
    if args.check:
        lines = text.split("\n")
        start, end = _table_span(lines)
        if sorted(seconds) != sorted(expected) or "\n".join(lines[start:end]) != table(seconds, recorded(text, "default")):
            print(f"runtimes: intro.md's table does not list exactly the chapters {expected}; "
                  "run scripts/execute.sh on the missing ones", file=sys.stderr)
            return 1
        print("runtimes: intro.md lists every chapter")
        return 0
    print(table(seconds, recorded(text, "default")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
