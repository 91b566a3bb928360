"""Run a chapter twice in one kernel, as a reader who presses "Run all" twice (or, with ``--each``, who
runs every cell twice in a row): nothing may raise, and every output that nbval compares must come out
the same the second time.

    python scripts/run_twice.py chapters/04_self_attention.ipynb [more notebooks]
    python scripts/run_twice.py --under 120 --jobs 2   # every chapter whose default run is under 120 s

Each notebook runs top to bottom in a fresh kernel of this environment (its folder as working directory,
an empty checkpoint folder), then every code cell runs once more in the same kernel (``--each``: each
cell runs twice before the next one). A cell marked
``NBVAL_IGNORE_OUTPUT`` is exempt from the comparison (it asserts what matters instead), as under nbval;
memory addresses are masked as ``.ci/nbval_sanitize.cfg`` masks them. Exit 1 with the first difference
of each failing notebook. With ``--under S`` the notebooks are the chapters of _toc.yml whose run time in
intro.md's table (scripts/runtimes.py) is under S seconds; with ``--jobs N`` N notebooks run at once, each
kernel on one thread. scripts/test.sh runs ``--under 120 --jobs 2`` after the nbval stage;
tests/test_rerun.py checks that this script catches a cell whose second run differs or raises.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtimes  # noqa: E402  (scripts/runtimes.py, beside this file)
from execute import CurrentEnvClient  # noqa: E402  (scripts/execute.py, beside this file)

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def shown(cell: nbformat.NotebookNode) -> list[str]:
    """What nbval compares of a cell's outputs: text and plain/markdown data, addresses masked, and the
    pieces of one stream joined (how a kernel splits its printing into messages varies from run to run)."""
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            text = "".join(o["text"])
            if out and out[-1].startswith(o["name"] + ":"):
                out[-1] += text
            else:
                out.append(o["name"] + ":" + text)
        elif o.get("output_type") in ("execute_result", "display_data"):
            data = o.get("data", {})
            out.append("".join(data.get("text/markdown", data.get("text/plain", ""))))
        elif o.get("output_type") == "error":
            out.append("error:" + o.get("ename", "") + ": " + o.get("evalue", ""))
    return [ADDRESS.sub(" at 0xADDRESS", text) for text in out]


def run_twice(path: Path, each: bool = False) -> str | None:
    """None if the second run equals the first and nothing raised, else what differed.

    ``each=False``: "Run all", then "Run all" again. ``each=True``: every cell twice in a row.
    """
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TFMINI_CACHE"] = cache
        os.environ["TFMINI_FULL"] = "0"  # a reader's default run
        client = CurrentEnvClient(nb, timeout=3600, kernel_name="python3",
                                  resources={"metadata": {"path": str(path.parent)}})
        with client.setup_kernel():
            code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
            passes = [[(i, c, None) for i, c in code], [(i, c, "second") for i, c in code]]
            if each:
                passes = [[(i, c, run) for i, c in code for run in (None, "second")]]
            first = {}
            for cells in passes:
                for i, cell, run in cells:
                    client.execute_cell(cell, i)  # raises CellExecutionError on an error
                    if run is None:
                        first[i] = shown(cell)
                    elif "NBVAL_IGNORE_OUTPUT" not in cell.source and shown(cell) != first[i]:
                        return f"cell {i} printed something else the second time:\n{first[i]}\n---\n{shown(cell)}"
    return None


def check(path: Path, each: bool = False) -> bool:
    """Run one notebook twice in this process and print the verdict; True if it passed."""
    try:
        problem = run_twice(path.resolve(), each)
    except Exception as error:  # a cell raised: the message names the cell and the error
        problem = f"{type(error).__name__}: {str(error)[-2000:]}"
    print(f"{path}: {'the same twice' if problem is None else 'FAILED: ' + problem}", flush=True)
    return problem is None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--under", type=float, help="add the chapters whose recorded run time is under this many seconds")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks at once (default 1); > 1: one thread each")
    parser.add_argument("--each", action="store_true", help="run every cell twice in a row instead of 'Run all' twice")
    args = parser.parse_args()
    paths = list(args.notebooks)
    if args.under is not None:
        seconds = {**runtimes.recorded(), **runtimes.recorded(column="default")}  # a reader's run where timed
        paths += [p for p in runtimes.toc_chapters() if seconds.get(p.name, args.under) < args.under]
    if not paths:
        parser.error("no notebook to run: name some, or give --under")
    if args.jobs <= 1:
        return 0 if all([check(p, args.each) for p in paths]) else 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TFMINI_FULL": "0"}
    flags = ["--each"] if args.each else []
    run = lambda p: subprocess.run([sys.executable, __file__, *flags, str(p)], env=env).returncode == 0  # noqa: E731
    with ThreadPoolExecutor(args.jobs) as pool:
        passed = list(pool.map(run, paths))
    print(f"run twice: {sum(passed)} of {len(paths)} notebooks the same twice")
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
