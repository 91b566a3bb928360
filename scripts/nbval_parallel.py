"""Strict nbval over the chapters in this environment (.venv, the pinned torch), on every core at once.

The test command (scripts/test.sh) compares the notebooks as on Colab instead (scripts/colab_run.py
--nbval); this script checks them with the pinned torch and a shared checkpoint folder, e.g. after
executing a chapter.

    python scripts/nbval_parallel.py                         # every chapter of _toc.yml, two at a time
    python scripts/nbval_parallel.py --workers 1 chapters/03_attention_in_general.ipynb

Each notebook is compared by its own ``pytest --nbval`` process, ``--workers`` of them at a time,
and every kernel runs on one thread (``OMP_NUM_THREADS=1``), so two workers keep two cores busy. The
chapters' models are small: one thread does most of what two would do on them, so two notebooks side
by side finish far sooner than the same notebooks one after the other on two threads. No committed
output depends on the number of threads; the cells whose outputs could (trained numbers) are
``NBVAL_IGNORE_OUTPUT`` and assert what matters.

The longest notebooks start first (by the run times in intro.md's table, scripts/runtimes.py), and a
worker that finishes takes the next one, so the workers end close together. All of them share one
fresh checkpoint folder (``TFMINI_CACHE``): a chapter reuses a model that another chapter trained
earlier in this run, or trains it itself, with the same result (``fit_or_load`` writes its
checkpoints atomically).

As in CI, the kernels run on the AVX2 paths of PyTorch and MKL (see scripts/test.sh) and draw figures
inline (no ``MPLBACKEND``). Prints each notebook's report as it ends, then a summary; exits 1 if any
notebook failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtimes  # noqa: E402  (scripts/runtimes.py, beside this file)

ROOT = runtimes.ROOT


def compare(path: Path, env: dict[str, str]) -> tuple[int, float, str]:
    """Run strict nbval over one notebook; returns (exit status, seconds, pytest's report)."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "--nbval-sanitize-with",
                           ".ci/nbval_sanitize.cfg", "-q", "-p", "no:cacheprovider", str(path)],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return done.returncode, time.monotonic() - start, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every chapter of _toc.yml")
    parser.add_argument("--workers", type=int, default=2, help="notebooks compared at once (default 2)")
    args = parser.parse_args()
    if args.workers < 1:
        parser.error(f"--workers: expected >= 1, got {args.workers}")
    notebooks = [p.resolve() for p in args.notebooks] or runtimes.toc_chapters()
    if missing := [str(p) for p in notebooks if not p.is_file()]:
        parser.error(f"no such notebook: {', '.join(missing)}")
    if not notebooks:
        print("nbval: no notebooks to compare")
        return 0

    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", ATEN_CPU_CAPABILITY="avx2",
               MKL_ENABLE_INSTRUCTIONS="AVX2", TFMINI_FULL="0", TFMINI_CACHE=tempfile.mkdtemp(prefix="tfmini-cache-"))
    seconds = runtimes.recorded()
    order = sorted(notebooks, key=lambda p: -seconds.get(p.name, max(seconds.values(), default=0)))
    start, failed = time.monotonic(), []
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        runs = {pool.submit(compare, path, env): path for path in order}
        for done in concurrent.futures.as_completed(runs):
            rc, took, report = done.result()
            name = runs[done].name
            print(f"-- nbval {name}: {'passed' if rc == 0 else f'FAILED (exit {rc})'} in {took:.0f} s", flush=True)
            if rc:
                failed.append(name)
                print(report, flush=True)
            else:
                print(report.strip().splitlines()[-1], flush=True)
    print(f"nbval: {len(notebooks) - len(failed)} of {len(notebooks)} notebook(s) passed in "
          f"{time.monotonic() - start:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
