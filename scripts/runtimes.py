"""How long each chapter takes to run, read from the notebooks' stored outputs.

    python scripts/runtimes.py            # print the table
    python scripts/runtimes.py --update   # write it into intro.md
    python scripts/runtimes.py --check    # exit 1 if intro.md's table is out of date

The table has one row per chapter of _toc.yml. The last code cell of every chapter prints
``this notebook ran in N s``; the committed outputs come from ``scripts/execute.sh``, which runs this
script with ``--update`` after executing notebooks. In intro.md the table follows the MyST comment line
``% chapter runtimes: ...`` (MARKER); tests/test_repo.py checks that it matches the notebooks.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTRO = ROOT / "intro.md"
MARKER = "% chapter runtimes: the table below is written by `python scripts/runtimes.py --update`"
RUNTIME = re.compile(r"this notebook ran in (\d+) s")
TITLE = re.compile(r"^#\s+(.+?)\s*$", re.MULTILINE)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def runtime(path: Path) -> int:
    """Seconds printed by the notebook's last code cell."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and _text(c["source"]).strip()]
    if not code:
        raise ValueError(f"{path.name}: no code cell")
    for output in code[-1].get("outputs", []):
        found = RUNTIME.search(_text(output.get("text")))
        if found:
            return int(found.group(1))
    raise ValueError(f"{path.name}: the last code cell does not print 'this notebook ran in N s'")


def title(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            found = TITLE.search(_text(cell["source"]))
            if found:
                return found.group(1)
    return path.stem


def toc_chapters() -> list[Path]:
    """The chapter notebooks that _toc.yml lists (those that are part of the book), in file order."""
    listed = set(re.findall(r"^\s*-?\s*file:\s*(chapters/\S+?)(?:\.ipynb)?\s*$",
                            (ROOT / "_toc.yml").read_text(encoding="utf-8"), re.MULTILINE))
    return [p for p in sorted((ROOT / "chapters").glob("*.ipynb")) if f"chapters/{p.stem}" in listed]


def runtimes() -> list[tuple[Path, str, int]]:
    return [(p, title(p), runtime(p)) for p in toc_chapters()]


def table(rows: list[tuple[Path, str, int]]) -> str:
    lines = ["| Chapter | Runs in |", "|---|---:|"]
    for path, name, seconds in rows:
        lines.append(f"| [{name}](chapters/{path.name}) | {seconds} s |")
    total = sum(seconds for _, _, seconds in rows)
    lines.append(f"| **All {len(rows)} chapters** | **{total // 60} min {total % 60:02d} s** |")
    return "\n".join(lines)


def replace_table(text: str, new_table: str) -> str:
    """intro.md's text with the table after MARKER replaced."""
    lines = text.split("\n")
    try:
        start = lines.index(MARKER) + 1
    except ValueError:
        raise ValueError(f"intro.md has no line {MARKER!r} to put the table after") from None
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[:start] + new_table.split("\n") + lines[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--update", action="store_true", help="write the table into intro.md")
    group.add_argument("--check", action="store_true", help="fail if intro.md's table is out of date")
    args = parser.parse_args(argv)

    new_table = table(runtimes())
    if not (args.update or args.check):
        print(new_table)
        return 0
    text = INTRO.read_text(encoding="utf-8")
    updated = replace_table(text, new_table)
    if args.check:
        if updated != text:
            print("runtimes: intro.md's table differs from the notebooks; run python scripts/runtimes.py --update",
                  file=sys.stderr)
            return 1
        print("runtimes: intro.md is up to date")
        return 0
    if updated != text:
        INTRO.write_text(updated, encoding="utf-8")
        print("runtimes: intro.md updated")
    else:
        print("runtimes: intro.md already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
