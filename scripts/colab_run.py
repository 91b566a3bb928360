"""Run every chapter the way Google Colab runs it: alone, in a fresh runtime, installing tfmini itself.

    python scripts/colab_run.py                     # every colab/*.ipynb (chapters/*.ipynb if no colab/)
    python scripts/colab_run.py colab/03_x.ipynb    # only the given notebooks
    python scripts/colab_run.py --jobs 2            # two notebooks at a time, one thread each
    python scripts/colab_run.py --jobs 2 --record   # time a reader's default run: intro.md's "Default run" column
    python scripts/colab_run.py --prepare           # only build .venv-colab (scripts/test.sh starts it early)
    python scripts/colab_run.py --nbval --jobs 2    # a reader's default run,
                                                    # every output compared with the committed one
    python scripts/colab_run.py --full --jobs 2     # and every study computed in full (TFMINI_FULL=1), in
                                                    # the chapters that have studies: it must run and assert
    python scripts/colab_run.py --nbval --full --jobs 2   # both in one pool of workers, longest first:
                                                    # stage 3 of scripts/test.sh

What a reader who opens a chapter in Colab has, and what this script recreates locally:

- a fresh runtime with its own Python packages: torch, numpy, matplotlib, transformers, ipykernel, pip
  and git, but neither tfmini nor einops. Here: ``.venv-colab/`` in the repository root (git-ignored; built once, a
  stamp file skips the install after that), with the newest torch on this machine that is *not*
  requirements.txt's pin (``TORCH`` below), so a chapter that only works with the pinned torch fails.
  Each notebook's kernel runs in a new empty venv that sees .venv-colab's packages through a .pth
  file and installs into itself, so nothing one notebook installs is there for the next one;
- ``google.colab`` in ``sys.modules``, so the setup cell's ``%pip install "tfmini @ git+<repo>@main"``
  runs, and so do the lines that scripts/colab.py adds to a Colab copy's setup cell for the packages its
  chapter declares (``colab_packages`` in the notebook's metadata: a real checkpoint with ``--no-deps``,
  ``gguf``), installed at their pins into that notebook's venv: an IPython startup file of the kernel
  only (IPYTHONDIR) registers a stand-in module;
- the course repository on GitHub: git rewrites that URL (GIT_CONFIG_* variables of the kernel) to a
  temporary bare repository whose ``main`` and release tag ``v<version>`` are the current working tree's
  tracked files (``git stash create``), so pip builds tfmini from what is checked out here and nothing leaves the machine;
- only the notebook file: each one runs alone in an empty temporary folder, with an empty checkpoint
  folder (TFMINI_CACHE), top to bottom, at most 3,600 s per cell (a guard against a hang, not a speed
  test: chapter 9's comparison cell takes about 1,200 s on one core), errors fatal except in cells
  tagged ``raises-exception``. A last added cell checks that tfmini came from pip's install into that
  notebook's venv and torch is ``TORCH``. Outputs are thrown away; nothing in the repository is written.
- with ``--nbval``, strict nbval executes the notebook instead (one execution, not two) and compares every
  output with the committed one, as ``scripts/nbval_parallel.py`` does in the course's own venv: the
  kernels run on the AVX2 paths of PyTorch and MKL, ``.ci/nbval_sanitize.cfg`` applies, the setup cell's
  output (pip's messages) is not compared, and a stand-in for ``myst_nb.glue`` (absent on Colab) records
  the glued values so that they are compared too.

With ``--jobs N`` (N > 1) N notebooks run at once, each kernel limited to one thread (as a Colab CPU
runtime's two cores shared with a second notebook would be): no result depends on the thread count,
since every check in a chapter holds with margin, and the outputs are not compared.

Prints one line per notebook and a summary; exits 1 if any notebook failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import multiprocessing
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import nbformat
import yaml
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from traitlets import Unicode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtimes  # noqa: E402  (scripts/runtimes.py, beside this file)

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-colab"
PYTHON, STAMP = VENV / "bin" / "python", VENV / ".colab-stamp"
# The newest torch on this machine's package mirror (/etc/xdg/pip/constraints.txt caps it at 2.14.1)
# that differs from requirements.txt's pin (2.13.0): Colab ships its own torch, never our pin, and the
# chapters must not depend on it. A CUDA build (it runs on the CPU here). Override: TFMINI_COLAB_TORCH.
TORCH = os.environ.get("TFMINI_COLAB_TORCH", "2.14.1")
# Colab also ships Hugging Face's transformers (and with it tokenizers) and accelerate: the chapters that
# compare tfmini with it run that comparison there too. It has no gguf: a chapter that reads SmolLM2's GGUF
# file declares gguf with the checkpoint (scripts/colab.py).
PREINSTALLED = [f"torch=={TORCH}", "numpy", "matplotlib", "ipykernel", "pip", "transformers", "accelerate"]
# A guard against a cell that hangs, not a limit on a result: chapter 9's comparison cell trains five
# models (about 20 minutes on one thread of this project's machines).
CELL_TIMEOUT_S = 3600
KERNEL_NAME = "colab"
# As for scripts/nbval_parallel.py: the committed outputs are compared on the AVX2 paths of PyTorch and MKL.
NBVAL_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}

# Kernel startup file: what makes `"google.colab" in sys.modules` true, as on Colab.
FAKE_COLAB = """\
import sys as _sys, types as _types
try:
    import google as _google  # a namespace package when e.g. protobuf is installed
except ImportError:
    _google = _sys.modules["google"] = _types.ModuleType("google")
_sys.modules["google.colab"] = _google.colab = _types.ModuleType("google.colab")
import importlib.machinery as _machinery  # a spec, as an imported module has (accelerate looks for it)
_google.colab.__spec__ = _machinery.ModuleSpec("google.colab", None)
del _sys, _types, _google, _machinery
"""
# Kernel startup file for --nbval only: the committed outputs hold the values that `glue` records for
# the book (myst_nb's glue: a display_data output of mime type application/papermill.record/...). Colab
# has no myst_nb, so tfmini.notebook.glue records nothing there; this stand-in records exactly what
# myst_nb.glue records (its code, myst_nb/ext/glue.py), so that nbval compares every glued value too.
FAKE_MYST_NB = """\
import sys as _sys, types as _types


def _glue(name, variable, display=True):
    import IPython
    from IPython.display import display as _show
    bundle, metadata = IPython.core.formatters.format_display_data(variable)
    prefix = "" if display else "application/papermill.record/"
    metadata["scrapbook"] = dict(name=name, mime_prefix=prefix)
    _show({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


_sys.modules["myst_nb"] = _types.ModuleType("myst_nb")
_sys.modules["myst_nb"].glue = _glue
del _sys, _types
"""
CHECK = f"""\
import sys, tfmini, torch
assert tfmini.__file__.startswith(sys.prefix) and "site-packages" in tfmini.__file__, tfmini.__file__
assert torch.__version__.split("+")[0] == {TORCH!r}, torch.__version__
"""


class ColabClient(NotebookClient):
    """A notebook client whose kernel is the Colab environment's Python (kernelspec KERNEL_NAME)."""

    kernel_dir = Unicode("", help="folder holding the kernelspec KERNEL_NAME").tag(config=True)

    def create_kernel_manager(self) -> AsyncKernelManager:
        specs = KernelSpecManager(kernel_dirs=[self.kernel_dir])
        self.km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs, config=self.config)
        return self.km


def run(*cmd: str | Path, cwd: Path = ROOT) -> str:
    """Run a command quietly; on failure, show its output and stop."""
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, text=True, capture_output=True)
    if done.returncode:
        sys.exit(f"{done.stdout}{done.stderr}colab: `{' '.join(map(str, cmd))}` failed (exit {done.returncode})")
    return done.stdout


def ensure_venv() -> None:
    """Create .venv-colab with the packages a Colab runtime has, unless its stamp says it is current."""
    stamp = hashlib.sha256(json.dumps([PREINSTALLED, sys.version]).encode()).hexdigest()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text().strip() == stamp:
        return
    print(f"colab: creating {VENV.name} with {' '.join(PREINSTALLED)} (takes minutes)", flush=True)
    start = time.perf_counter()
    venv.EnvBuilder(clear=True, with_pip=True).create(VENV)
    run(PYTHON, "-m", "pip", "install", "-q", "--upgrade", *PREINSTALLED)
    STAMP.write_text(stamp + "\n")
    print(f"colab: {VENV.name} installed in {time.perf_counter() - start:.0f} s", flush=True)


def local_github(tmp: Path) -> dict[str, str]:
    """Git settings that serve the course repository's URL from a bare copy of the working tree."""
    repo = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    commit = run("git", "stash", "create").strip() or run("git", "rev-parse", "HEAD").strip()
    bare = tmp / "tfmini.git"
    run("git", "init", "-q", "--bare", f"--initial-branch={repo['branch']}", bare)
    run("git", "push", "-q", bare, f"{commit}:refs/heads/{repo['branch']}")
    # the setup cells install the release tag v<version> (scripts/execute.py pins it): here, the working tree
    version = re.search(r'^__version__ = "([^"]+)"', (ROOT / "tfmini" / "__init__.py").read_text(), re.MULTILINE)[1]
    run("git", "push", "-q", bare, f"{commit}:refs/tags/v{version}")
    url = repo["url"].rstrip("/")
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{bare.as_uri()}.insteadOf", "GIT_CONFIG_VALUE_0": url}


def shared_env(tmp: Path) -> dict[str, str]:
    """The kernels' environment: this process's without the course venv, plus the Colab stand-ins."""
    (tmp / "ipython" / "profile_default" / "startup").mkdir(parents=True)
    (tmp / "ipython" / "profile_default" / "startup" / "00-colab.py").write_text(FAKE_COLAB)
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "VIRTUAL_ENV", "PYTHONPATH")}
    course_bin = Path(os.environ["VIRTUAL_ENV"], "bin") if "VIRTUAL_ENV" in os.environ else None
    path = [p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != course_bin]
    env.update(local_github(tmp), PATH=os.pathsep.join(path), IPYTHONDIR=str(tmp / "ipython"),
               MPLCONFIGDIR=str(tmp / "matplotlib"), PYTHONHASHSEED="0", HF_HUB_OFFLINE="1",
               PIP_CACHE_DIR=str(VENV / ".pip-cache"))  # kept between notebooks and runs: wheels only
    return env


def fresh_runtime(root: Path) -> Path:
    """A new venv under `root` that sees .venv-colab's packages (a .pth file) but installs into itself,
    so that what one notebook's %pip installs never reaches the next; its kernelspec. Returns its bin/."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root / "venv")
    base = next((VENV / "lib").glob("python3*/site-packages"))
    site = next((root / "venv" / "lib").glob("python3*/site-packages"))
    (site / "colab-base.pth").write_text(f"import site; site.addsitedir({str(base)!r})\n")
    bin_dir = root / "venv" / "bin"
    (bin_dir / "pip").write_text('#!/bin/sh\nexec "$(dirname "$0")/python" -m pip "$@"\n')
    (bin_dir / "pip").chmod(0o755)
    argv = [str(bin_dir / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec := root / "kernels" / KERNEL_NAME / "kernel.json").parent.mkdir(parents=True)
    spec.write_text(json.dumps({"argv": argv, "display_name": "Colab stand-in", "language": "python"}))
    return bin_dir


def new_runtime(path: Path, env: dict[str, str], tmp: Path) -> tuple[Path, nbformat.NotebookNode, dict[str, str]]:
    """A fresh runtime for `path` (an empty folder with an empty TFMINI_CACHE: a Colab reader has no
    checkpoints yet) and the notebook with the CHECK cell added; returns (root, notebook, kernel env)."""
    root = Path(tempfile.mkdtemp(prefix=f"{path.stem}-", dir=tmp))
    bin_dir = fresh_runtime(root)
    (root / "content").mkdir()  # Colab's working directory, with nothing but the notebook
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(CHECK))
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "TFMINI_CACHE": str(root / "cache")}
    return root, nb, env


def run_notebook(path: Path, env: dict[str, str], tmp: Path) -> tuple[bool, float, str]:
    """Execute a copy of `path` alone in a new runtime (``new_runtime``); returns (ok, seconds, error)."""
    root, nb, env = new_runtime(path, env, tmp)
    client = ColabClient(nb, timeout=CELL_TIMEOUT_S, allow_errors=False, record_timing=False, kernel_name=KERNEL_NAME,
                         kernel_dir=str(root / "kernels"), resources={"metadata": {"path": str(root / "content")}})
    current = [0]
    client.on_cell_execute = lambda cell, cell_index: current.__setitem__(0, cell_index)
    start = time.perf_counter()
    try:
        client.execute(env=env)
    except Exception as error:  # noqa: BLE001  (CellExecutionError, DeadKernelError, timeouts: all fail)
        errors = [out for out in nb.cells[current[0]].get("outputs", []) if out.output_type == "error"]
        message = f"{errors[-1].ename}: {errors[-1].evalue}" if errors else f"{type(error).__name__}: {error}"
        return False, time.perf_counter() - start, f"cell #{current[0]}: {message.splitlines()[0]}"
    return True, time.perf_counter() - start, ""


def compare_notebook(path: Path, env: dict[str, str], tmp: Path) -> tuple[bool, float, str]:
    """As ``run_notebook``, but executed by strict nbval, which compares every cell's outputs with the
    committed ones (``--nbval``): one execution checks both the Colab conditions and the outputs."""
    root, nb, env = new_runtime(path, env, tmp)
    for cell in nb.cells:  # the setup cell prints pip's messages on Colab, nothing where it was executed
        if cell.cell_type == "code" and "google.colab" in cell.source:
            cell.metadata.setdefault("tags", []).append("nbval-ignore-output")
    nbformat.write(nb, root / "content" / path.name)
    # beside the folder, not in it: pytest reads a conftest.py above the notebook; the kernel never sees it
    shutil.copyfile(ROOT / "chapters" / "conftest.py", root / "conftest.py")
    startup = root / "ipython" / "profile_default" / "startup"
    shutil.copytree(Path(env["IPYTHONDIR"]) / "profile_default" / "startup", startup)
    (startup / "01-myst-nb-glue.py").write_text(FAKE_MYST_NB)
    env = {**env, "JUPYTER_PATH": str(root), "IPYTHONDIR": str(root / "ipython"), **NBVAL_ENV}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-kernel-name", KERNEL_NAME,
                           "--nbval-sanitize-with", str(ROOT / ".ci" / "nbval_sanitize.cfg"),
                           "--nbval-cell-timeout", str(CELL_TIMEOUT_S), "-q", "-p", "no:cacheprovider",
                           f"content/{path.name}"], cwd=root, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    took = time.monotonic() - start
    return done.returncode == 0, took, "" if done.returncode == 0 else "\n" + done.stdout[-6000:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: colab/*.ipynb, else chapters/*.ipynb")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at once (default 1); > 1: one thread each")
    folder = ROOT / "colab" if (ROOT / "colab").is_dir() else ROOT / "chapters"
    parser.add_argument("--prepare", action="store_true", help="only create .venv-colab if needed, then exit")
    parser.add_argument("--nbval", action="store_true",
                        help="execute with strict nbval: also compare every output with the committed one")
    parser.add_argument("--full", action="store_true",
                        help="compute every study (TFMINI_FULL=1, as the book's execution does); default: a "
                             "reader's quick run, in which the slow studies show their recorded results. "
                             "With --nbval: both, in one pool of workers (every notebook's default run "
                             "compared, and each chapter with studies run once more in full)")
    parser.add_argument("--record", action="store_true",
                        help="write each notebook's time into intro.md's 'Default run' column (not with --full)")
    args = parser.parse_args(argv)
    if args.record and args.full:
        parser.error("--record: the 'Default run' column times a reader's run; drop --full")
    if args.prepare:
        ensure_venv()
        return 0
    if args.jobs < 1:
        parser.error(f"--jobs: expected >= 1, got {args.jobs}")
    notebooks = [p.resolve() for p in args.notebooks] or sorted(folder.glob("*.ipynb"))
    if missing := [str(p) for p in notebooks if not p.is_file()]:
        parser.error(f"no such notebook: {', '.join(missing)}")
    with_studies = [p for p in notebooks if "study(" in p.read_text(encoding="utf-8")]
    # the runs: (notebook, mode); "nbval" = a reader's default run, compared; "full" = every study
    # computed, asserts checked; "default" = a reader's default run, not compared
    if args.nbval and args.full:
        runs_wanted = [(p, "full") for p in with_studies] + [(p, "nbval") for p in notebooks]
    elif args.full:
        # the chapters whose full run differs from the default one (all given ones, if named)
        runs_wanted = [(p, "full") for p in (notebooks if args.notebooks else with_studies)]
    else:
        runs_wanted = [(p, "nbval" if args.nbval else "default") for p in notebooks]
    if not runs_wanted:
        print(f"colab: no notebooks in {folder.relative_to(ROOT)}/")
        return 0

    ensure_venv()
    print(f"colab: each notebook in a new venv over {VENV.name} (torch {TORCH})", flush=True)
    start, failed, timed = time.perf_counter(), 0, {}
    with tempfile.TemporaryDirectory(prefix="tfmini-colab-") as name:
        env = shared_env(Path(name))
        if args.jobs > 1:
            env.update({var: "1" for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
        # Longest first (full runs by intro.md's "Full run" column; default runs by its "Default run"
        # column, else by the full run, which is the default run in a chapter without studies and
        # taken as three times it in one with studies), so that the workers finish close together.
        full_s, default_s = runtimes.recorded(), runtimes.recorded(column="default")

        def expected(run):
            path, mode = run
            if mode == "full":
                return full_s.get(path.name, 0)
            if path.name in default_s:
                return default_s[path.name]
            return full_s.get(path.name, 0) // (3 if path in with_studies else 1)

        order = sorted(runs_wanted, key=lambda r: (-expected(r), -r[0].stat().st_size)) if args.jobs > 1 else runs_wanted
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {}
            for path, mode in order:
                job = compare_notebook if mode == "nbval" else run_notebook
                futures[pool.submit(job, path, {**env, "TFMINI_FULL": "1" if mode == "full" else "0"},
                                    Path(name))] = (path, mode)
            for done in concurrent.futures.as_completed(futures):
                path, mode = futures[done]
                ok, seconds, error = done.result()
                failed += not ok
                if ok and mode != "full":
                    timed[path.name] = seconds
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                tag = {"nbval": "default, compared", "full": "full", "default": "default"}[mode]
                print(f"colab: {str(shown):45} {tag:17} {seconds:7.1f} s  {'ok' if ok else 'FAILED  ' + error}",
                      flush=True)
    total = time.perf_counter() - start
    if args.record and timed:
        runtimes.record(timed, column="default")
        print(f"colab: default-run times of {len(timed)} notebook(s) written to intro.md")
    print(f"colab: {len(runs_wanted) - failed} of {len(runs_wanted)} run(s) passed in {total:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
