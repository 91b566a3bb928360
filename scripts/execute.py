"""Execute the course notebooks and write them back with reproducible outputs.

This is the only way notebook outputs are produced: never edit outputs by hand.

    python scripts/execute.py                      # every chapters/*.ipynb
    python scripts/execute.py chapters/03_x.ipynb  # only the given notebooks
    python scripts/execute.py --recorded chapters/12_x.ipynb  # studies read their recordings (below)
    python scripts/execute.py --pin                # only re-point the setup cells at v<version>

Each notebook runs top to bottom in a fresh python3 kernel of *this* Python environment (not
whatever kernel a user-level kernelspec points to), with the notebook's folder as working directory
and an hour's limit per cell (a guard against a hung kernel, far above any cell's run time on one slow
core). Any error stops the run (cells tagged ``raises-exception`` excepted, as in Jupyter Book and
nbval). The notebook is then written back with

- execution counts 1..N over the non-empty code cells, in order;
- normalised notebook metadata: kernelspec python3, a minimal language_info without the Python
  version, no widget state;
- no volatile cell metadata (execution timestamps, ``ExecuteTime``, ``collapsed``, ``scrolled``);

so that executing an unchanged notebook twice gives no diff. Each notebook's execution time is
written into intro.md's table of run times (scripts/runtimes.py); no notebook times itself.

Every study (``tfmini.notebook.study``) is computed and recorded (``TFMINI_FULL=1``). With
``--recorded`` the studies read what the last full execution recorded instead (``TFMINI_FULL=0``), and
their cells say so: for a chapter whose study code did not change since (a new exercise cell, a
corrected sentence). Such a run is not a full run, so intro.md's table is left as it is.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtimes  # noqa: E402  (scripts/runtimes.py, beside this file)

ROOT = Path(__file__).resolve().parent.parent
CELL_TIMEOUT_S = 3600

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
VOLATILE_NOTEBOOK_METADATA = ("widgets", "varInspector", "toc", "vscode", "colab", "accelerator")
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled", "pycharm")


class CurrentEnvClient(NotebookClient):
    """A notebook client whose python3 kernel is always this interpreter (sys.executable).

    With no kernel directories, jupyter_client falls back to ipykernel's built-in spec, which runs
    ``sys.executable -m ipykernel_launcher``; a python3 kernelspec in the user's Jupyter folders can
    therefore not redirect execution to another Python. The client still owns the kernel manager, so
    it shuts the kernel down when the notebook is done.
    """

    def create_kernel_manager(self) -> AsyncKernelManager:
        self.km = AsyncKernelManager(
            kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[]), config=self.config
        )
        return self.km


def normalise(nb: nbformat.NotebookNode) -> None:
    """Renumber execution counts and strip metadata that changes from run to run."""
    count = 0
    used_ids: set[str] = set()
    for index, cell in enumerate(nb.cells):
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        cell_id = cell.get("id")
        if not cell_id or cell_id in used_ids:
            cell_id = f"cell-{index:03d}"
            cell["id"] = cell_id
        used_ids.add(cell_id)
        if cell.cell_type != "code":
            continue
        if cell.source.strip():
            count += 1
            cell.execution_count = count
        else:
            cell.execution_count = None
            cell.outputs = []
        for output in cell.outputs:
            if output.output_type == "execute_result":
                output.execution_count = cell.execution_count

    meta = nb.metadata
    for key in VOLATILE_NOTEBOOK_METADATA:
        meta.pop(key, None)
    meta["kernelspec"] = dict(KERNELSPEC)
    meta["language_info"] = dict(LANGUAGE_INFO)
    nb.nbformat, nb.nbformat_minor = 4, 5


# The Colab setup cell installs tfmini from the course repository at a release tag, never at a branch,
# so that a reader's run uses the code that produced the outputs on the page.
INSTALL = re.compile(r'(tfmini(?:\[[a-z,]+\])? @ git\+https://github\.com/[^@"\s]+)@[^"\s]+"')


def version() -> str:
    """tfmini's version, as tfmini/__init__.py states it (the release tag is ``v`` + this)."""
    found = re.search(r'^__version__ = "([^"]+)"', (ROOT / "tfmini" / "__init__.py").read_text(), re.MULTILINE)
    if not found:
        raise ValueError("tfmini/__init__.py: no __version__ line")
    return found.group(1)


def pin_install(nb: nbformat.NotebookNode, tag: str) -> None:
    """Point every ``tfmini @ git+…@ref`` install in the notebook at the release tag ``tag``."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = INSTALL.sub(lambda m: f'{m.group(1)}@{tag}"', cell.source)


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    pin_install(nb, f"v{version()}")
    client = CurrentEnvClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    normalise(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to execute (default: chapters/*.ipynb)")
    parser.add_argument("--pin", action="store_true",
                        help="only point each setup cell's install at the release tag v<version> (after a "
                             "version bump); nothing is executed, no output changes")
    parser.add_argument("--recorded", action="store_true",
                        help="studies read their recorded results (TFMINI_FULL=0); intro.md is left as it is")
    args = parser.parse_args(argv)

    notebooks = [p.resolve() for p in args.notebooks] or sorted((ROOT / "chapters").glob("*.ipynb"))
    if not notebooks:
        print("execute: no notebooks found")
        return 0
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    if args.pin:
        for path in notebooks:
            nb = nbformat.read(path, as_version=4)
            pin_install(nb, f"v{version()}")
            nbformat.write(nb, path)
        print(f"execute: {len(notebooks)} notebook(s) now install tfmini v{version()}")
        return 0

    # A notebook kernel must show figures inline: ipykernel selects the inline backend only when
    # MPLBACKEND is unset, so a non-interactive backend set for scripts must not leak into kernels.
    os.environ.pop("MPLBACKEND", None)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    # Nothing is downloaded at run time: the one cell that fetches real weights (chapter 13, for Colab)
    # finds the Hugging Face Hub unreachable at once and says so, instead of waiting for a network.
    os.environ["HF_HUB_OFFLINE"] = "1"
    # The book shows every study computed in full (tfmini.notebook.full_run); the results of the slow
    # ones are recorded for a reader's quick default run (tfmini.notebook.study).
    os.environ["TFMINI_FULL"] = "0" if args.recorded else "1"
    # Threads that wait for work sleep instead of spinning: on a machine busy with other processes,
    # spinning OpenMP threads make every small operation of the RNN chapters a hundred times slower.
    # It changes no result (the number of threads, and so every sum's order, stays the same).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # A fresh checkpoint folder for this run: a chapter may reuse a model trained by an earlier
    # chapter of the same run (tfmini.fit_or_load), never one left over from another run.
    os.environ["TFMINI_CACHE"] = tempfile.mkdtemp(prefix="tfmini-cache-")

    print(f"execute: kernel python = {sys.executable}")
    measured: dict[str, float] = {}
    for path in notebooks:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"execute: {shown} ...", flush=True)
        elapsed = execute(path)
        if path.parent == ROOT / "chapters":
            measured[path.name] = elapsed
        print(f"execute: {shown} done in {elapsed:.1f} s", flush=True)
    print(f"execute: {len(notebooks)} notebook(s) in {sum(measured.values()):.1f} s")
    # The landing page's table of run times, from this run's clock (rows of other chapters stay).
    if not args.recorded:
        runtimes.record(measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
