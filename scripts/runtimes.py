"""How long each chapter takes to execute, kept as a table in intro.md.

    python scripts/runtimes.py            # print the table as intro.md has it
    python scripts/runtimes.py --check    # exit 1 unless the table has one row per chapter of _toc.yml

The execute command (scripts/execute.py) times every notebook it runs, from kernel start to the
last cell, and calls :func:`record` to write those seconds into intro.md's table; rows of chapters it
did not run keep their last value. No notebook measures or asserts its own run time: a slow machine
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
ROW = re.compile(r"^\| \[(?P<title>.+)\]\(chapters/(?P<file>[^)]+\.ipynb)\) \| (?P<seconds>\d+) s \|$")
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


def recorded(text: str | None = None) -> dict[str, int]:
    """Seconds per notebook file name, as intro.md's table has them."""
    lines = (INTRO.read_text(encoding="utf-8") if text is None else text).split("\n")
    start, end = _table_span(lines)
    return {m["file"]: int(m["seconds"]) for m in map(ROW.match, lines[start:end]) if m}


def table(seconds: dict[str, int]) -> str:
    """The Markdown table: one row per chapter of _toc.yml, then the total."""
    rows = ["| Chapter | Runs in |", "|---|---:|"]
    for path in toc_chapters():
        rows.append(f"| [{title(path)}](chapters/{path.name}) | {seconds[path.name]} s |")
    total = sum(seconds[p.name] for p in toc_chapters())
    rows.append(f"| **All {len(toc_chapters())} chapters** | **{total // 60} min {total % 60:02d} s** |")
    return "\n".join(rows)


def record(measured: dict[str, float]) -> None:
    """Write the measured seconds of the given notebooks (by file name) into intro.md's table."""
    text = INTRO.read_text(encoding="utf-8")
    seconds = recorded(text)
    seconds.update({name: round(s) for name, s in measured.items()})
    missing = [p.name for p in toc_chapters() if p.name not in seconds]
    if missing:
        raise ValueError(f"no run time recorded yet for {missing}: execute them (scripts/execute.sh)")
    lines = text.split("\n")
    start, end = _table_span(lines)
    INTRO.write_text("\n".join(lines[:start] + table(seconds).split("\n") + lines[end:]), encoding="utf-8")


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
        if sorted(seconds) != sorted(expected) or "\n".join(lines[start:end]) != table(seconds):
            print(f"runtimes: intro.md's table does not list exactly the chapters {expected}; "
                  "run scripts/execute.sh on the missing ones", file=sys.stderr)
            return 1
        print("runtimes: intro.md lists every chapter")
        return 0
    print(table(seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
