"""``python -m diagrams``: (re)draw images/diagrams/*.svg; ``--check`` only compares.

    python -m diagrams                 # write every diagram into images/diagrams/
    python -m diagrams --check         # exit 1, naming the files, if drawing would change any
    python -m diagrams --only masks    # just these diagrams
    python -m diagrams --out DIR       # somewhere else
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from . import DIAGRAMS, OUTPUT, ROOT, build


def differences(out: Path = OUTPUT) -> list[str]:
    """The committed diagrams that are missing, stale or extra: empty when images/diagrams/ is up to date."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p.read_bytes() for p in build(Path(tmp))}
    problems = [f"{name} ({'stale' if (out / name).is_file() else 'missing'})" for name, data in fresh.items()
                if not (out / name).is_file() or (out / name).read_bytes() != data]
    return problems + [f"{p.name} (extra)" for p in sorted(out.glob("*.svg")) if p.name not in fresh]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diagrams", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 unless images/diagrams/ is up to date")
    parser.add_argument("--only", nargs="*", choices=[d.name for d in DIAGRAMS], help="draw only these")
    parser.add_argument("--out", type=Path, default=OUTPUT, help="the folder to write into")
    args = parser.parse_args(argv)
    if args.check:
        problems = differences(args.out)
        print("diagrams: up to date" if not problems else
              "diagrams: not up to date, run python -m diagrams:\n  " + "\n  ".join(problems))
        return 1 if problems else 0
    written = build(args.out, args.only)
    where = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print(f"diagrams: wrote {len(written)} SVG files into {where}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
