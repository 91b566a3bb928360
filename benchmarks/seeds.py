"""Do the chapters' trained bars hold over several seeds, not only the one the book ran?

    python benchmarks/seeds.py                    # every check, seeds 0, 1 and 2
    python benchmarks/seeds.py --seeds 0 1 2 3 4  # more seeds
    python benchmarks/seeds.py --only ch09        # one chapter's checks

Each module ``benchmarks/seed_checks/chNN.py`` repeats the training recipe of a chapter that asserts
a bar on a trained model (same data, model, optimiser and fixed number of steps) with every seed
varied together: the model's initial weights, the batch order and anything else the chapter draws.
It defines

- ``BARS``: ``{metric: (op, bar)}``, the chapter's asserted bars, ``op`` one of ``">="`` / ``"<="``;
- ``run(seed) -> {metric: value}``: one training run and its measurements.

The script prints one table row per metric: the bar, the value for each seed, the worst seed and
its margin over the bar. It exits 1 if any seed misses any bar. It decides nothing in the book: run it
after changing a recipe or a bar, on CPU and on another torch, and read the worst seed. Nothing here
is timed: every run is a fixed number of steps.
"""

from __future__ import annotations

import argparse
import importlib
import operator
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
OPS = {">=": operator.ge, "<=": operator.le}


def checks(only: list[str] | None) -> list[str]:
    names = sorted(p.stem for p in (HERE / "seed_checks").glob("ch*.py"))
    return [n for n in names if not only or n in only]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", help="module names, e.g. ch09")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, seeds {args.seeds}\n", flush=True)
    header = "| check | metric | bar | " + " | ".join(f"seed {s}" for s in args.seeds) + " | worst | margin |"
    rows, failed = [header, "|" + "---|" * (len(args.seeds) + 5)], []
    for name in checks(args.only):
        module = importlib.import_module(f"seed_checks.{name}")
        results = []
        for seed in args.seeds:
            results.append(module.run(seed))
            print(f"{name} seed {seed}: " + ", ".join(f"{k} {v:.4g}" for k, v in results[-1].items()), flush=True)
        for metric, (op, bar) in module.BARS.items():
            values = [r[metric] for r in results]
            worst = min(values) if op == ">=" else max(values)
            ok = all(OPS[op](v, bar) for v in values)
            failed += [] if ok else [f"{name}.{metric}"]
            cells = " | ".join(f"{v:.4g}" for v in values)
            rows.append(f"| {name} | {metric} | {op} {bar:g} | {cells} | {worst:.4g} | "
                        f"{abs(worst - bar):.3g}{'' if ok else ' FAIL'} |")
    print("\n" + "\n".join(rows))
    if failed:
        print(f"\nbars missed by some seed: {', '.join(failed)}")
        return 1
    print("\nevery seed clears every bar")
    return 0


if __name__ == "__main__":
    sys.exit(main())
