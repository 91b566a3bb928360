"""scripts/run_twice.py, which runs a chapter twice in one kernel (scripts/test.sh runs it on the short
chapters): it passes a notebook whose cells give the same output twice, and catches one whose second run
prints something else or raises."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "run_twice.py"


def run(tmp_path: Path, *cells: str, each: bool = False) -> subprocess.CompletedProcess:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    flags = ["--each"] if each else []
    return subprocess.run([sys.executable, str(SCRIPT), *flags, str(path)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("cells, problem", [
    (("try:\n    n += 1\nexcept NameError:\n    n = 0\nprint(n)",), "cell 0 printed something else the second time"),
    (("print(x if 'x' in globals() else 'no x yet')", "x = 1"), "cell 0 printed something else"),
    (("if 'seen' in globals():\n    raise RuntimeError('second run')\nseen = True",), "second run"),
])
def test_run_all_twice_catches_a_cell_that_changes_or_raises(tmp_path, cells, problem):
    done = run(tmp_path, *cells)
    assert done.returncode == 1 and problem in done.stdout, done.stdout + done.stderr


def test_each_cell_twice_catches_a_cell_that_depends_on_its_own_last_run(tmp_path):
    cells = ("log = []", "log.append(1)\nprint(len(log))")
    assert run(tmp_path, *cells).returncode == 0                # "Run all" twice starts log afresh
    done = run(tmp_path, *cells, each=True)
    assert done.returncode == 1 and "cell 1 printed something else" in done.stdout, done.stdout + done.stderr


def test_a_notebook_that_runs_the_same_twice_passes(tmp_path):
    cells = ("import random\nrandom.seed(0)\nprint(random.random())", "# NBVAL_IGNORE_OUTPUT\nimport time\nprint(time.time())")
    for each in (False, True):
        done = run(tmp_path, *cells, each=each)
        assert done.returncode == 0 and "the same twice" in done.stdout, done.stdout + done.stderr
