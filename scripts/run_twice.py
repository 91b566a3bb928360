"""Run a chapter twice in one kernel, as a reader who presses "Run all" twice: nothing may raise, and
every output that nbval compares must come out the same the second time.

    python scripts/run_twice.py chapters/04_self_attention.ipynb [more notebooks]

Each notebook runs top to bottom in a fresh kernel of this environment (its folder as working directory,
an empty checkpoint folder), then every code cell runs once more in the same kernel. A cell marked
``NBVAL_IGNORE_OUTPUT`` is exempt from the comparison (it asserts what matters instead), as under nbval;
memory addresses are masked as ``.ci/nbval_sanitize.cfg`` masks them. Exit 1 with the first difference
of each failing notebook. ``tests/test_rerun.py`` runs it on the chapters whose default run is short.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from execute import CurrentEnvClient  # noqa: E402  (scripts/execute.py, beside this file)

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def shown(cell: nbformat.NotebookNode) -> list[str]:
    """What nbval compares of a cell's outputs: text and plain/markdown data, addresses masked."""
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o["name"] + ":" + "".join(o["text"]))
        elif o.get("output_type") in ("execute_result", "display_data"):
            data = o.get("data", {})
            out.append("".join(data.get("text/markdown", data.get("text/plain", ""))))
        elif o.get("output_type") == "error":
            out.append("error:" + o.get("ename", "") + ": " + o.get("evalue", ""))
    return [ADDRESS.sub(" at 0xADDRESS", text) for text in out]


def run_twice(path: Path) -> str | None:
    """None if the second run equals the first and nothing raised, else what differed."""
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TFMINI_CACHE"] = cache
        client = CurrentEnvClient(nb, timeout=3600, kernel_name="python3",
                                  resources={"metadata": {"path": str(path.parent)}})
        with client.setup_kernel():
            code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
            first = {}
            for rnd in (1, 2):
                for i, cell in code:
                    client.execute_cell(cell, i)  # raises CellExecutionError on an error
                    if rnd == 1:
                        first[i] = shown(cell)
                    elif "NBVAL_IGNORE_OUTPUT" not in cell.source and shown(cell) != first[i]:
                        return f"cell {i} printed something else the second time:\n{first[i]}\n---\n{shown(cell)}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    failed = 0
    for path in parser.parse_args().notebooks:
        try:
            problem = run_twice(path.resolve())
        except Exception as error:  # a cell raised: the message names the cell and the error
            problem = f"{type(error).__name__}: {str(error)[-2000:]}"
        print(f"{path}: {'the same twice' if problem is None else 'FAILED: ' + problem}", flush=True)
        failed += problem is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
