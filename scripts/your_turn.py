"""The "Your turn" cells: a piece the learner writes and checks with :mod:`tfmini.exercises`.

Each chapter has one "Your turn" code cell, marked by its metadata ``{"tfmini": {"exercise": [names]}}``
(and tagged ``hide-cell``). In the book it holds a worked solution and its ``check``, executed and
folded, so the page shows that the check passes. Its Colab copy (written by scripts/colab.py through
:func:`colab_cell`) holds the stub instead: the function's signature and docstring, a body that raises
``NotImplementedError``, and the check, whose recorded output is what the stub prints ("not attempted
yet"), so nbval passes on both copies and a Colab reader writes the function.

    python scripts/your_turn.py            # add the cells to chapters that lack them (then execute those)
    python scripts/your_turn.py --check    # exit 1 unless every chapter has its cell, as EXERCISES says
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tfmini import exercises  # noqa: E402

# Which pieces each chapter asks the learner to write (file-name prefix -> exercise names).
EXERCISES = {
    "00": ["padding_mask"], "01": ["lstm_step"], "02": ["additive_score"], "03": ["masked_softmax"],
    "04": ["attention"], "05": ["split_heads", "merge_heads"], "06": ["sinusoidal"], "07": ["layer_norm"],
    "08": ["causal_mask"], "09": ["cross_attention"], "10": ["greedy", "beam_step"], "11": ["kv_cache_step"],
    "12": ["greedy"], "13": ["merge_heads"], "14": ["bpe_merge"], "15": ["apply_rope"],
    "16": ["rms_norm", "swiglu", "gqa"],
}
IMPORT = "from tfmini.exercises import check, hint, solution"


def exercise_names(cell) -> list[str]:
    """The exercises of a "Your turn" cell (empty for any other cell)."""
    return list(cell.get("metadata", {}).get("tfmini", {}).get("exercise", []))


def _strip_import(src: str) -> str:
    return src.replace(IMPORT + "\n", "").strip("\n")


def _own_names(src: str, names: list[str]) -> str:
    """The learner's functions are called ``my_<name>``: they never replace a chapter's own ``<name>``."""
    for name in names:
        src = re.sub(rf"\bdef {name}\(", f"def my_{name}(", src)
        src = src.replace(f"check({name!r}, {name})", f"check({name!r}, my_{name})")
    return src


def solution_source(names: list[str]) -> str:
    """The book's cell: the reference solutions, then their checks."""
    imports, bodies = [], []
    for name in names:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exercises.solution(name)
        lines = out.getvalue().strip("\n").split("\n")
        head = [line for line in lines if line.startswith(("import ", "from "))]
        imports += [line for line in head if line not in imports]
        bodies.append("\n".join(line for line in lines if line not in head).strip("\n"))
    checks = "\n".join(f"check({name!r}, {name})" for name in names)
    return _own_names("\n".join([IMPORT, *imports]) + "\n\n\n" + "\n\n\n".join(bodies) + "\n\n\n" + checks, names)


def stub_source(names: list[str]) -> str:
    """The Colab copy's cell: the stubs and their checks."""
    return _own_names(IMPORT + "\n\n\n" + "\n\n\n".join(_strip_import(exercises.stub(name)) for name in names), names)


def stub_outputs(names: list[str], execution_count: int | None = None) -> list:
    """What the stub cell shows when run, computed here by running it as Jupyter would: what it prints,
    then the value of its last line (``check`` returns ``False``)."""
    tree = ast.parse(stub_source(names))
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    scope, out = {"__name__": "__your_turn__"}, io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tree, "<your turn>", "exec"), scope)  # noqa: S102
        value = eval(compile(ast.Expression(last.value), "<your turn>", "eval"), scope) if last else None  # noqa: S307
    outputs = [nbformat.v4.new_output("stream", name="stdout", text=out.getvalue())]
    if value is not None:
        outputs.append(nbformat.v4.new_output("execute_result", data={"text/plain": repr(value)},
                                              execution_count=execution_count))
    return outputs


def colab_cell(cell) -> None:
    """Turn the book's "Your turn" cell into the Colab copy's stub (in place); other cells are left alone."""
    names = exercise_names(cell)
    if not names:
        return
    cell.source = stub_source(names)
    cell.outputs = stub_outputs(names, cell.get("execution_count"))
    tags = [t for t in cell.metadata.get("tags", []) if t != "hide-cell"]
    if tags:
        cell.metadata["tags"] = tags
    else:
        cell.metadata.pop("tags", None)


def markdown(names: list[str]) -> str:
    """The text above the cell: a folded box titled with what to write (its title shows; the rest folds)."""
    funcs = " and ".join(f"`my_{exercises.signature(n).splitlines()[0].removeprefix('def ').rstrip(':')}`" for n in names)
    helpers = ("`hint(name)` gives a hint and `solution(name)` prints a reference solution" if len(names) > 1 else
               f"`hint({names[0]!r})` gives a hint and `solution({names[0]!r})` prints a reference solution")
    return (
        f":::{{admonition}} Your turn: write {funcs}\n:class: tip dropdown\n\n"
        "`check` runs your function on random shapes and on the edge cases that break implementations, "
        "compares it with `tfmini`, and says which case fails, what was expected, what came out and the "
        f"likely cause; {helpers}. In Colab the cell below holds a stub: replace `raise NotImplementedError` "
        "with your code and run it. On this page it holds a worked solution, folded, and the check it passes.\n:::"
    )


def insert(path: Path) -> bool:
    """Add the chapter's "Your turn" cells before "Check your understanding" (else before the summary)."""
    nb = nbformat.read(path, as_version=4)
    names = EXERCISES[path.name[:2]]
    if any(exercise_names(c) for c in nb.cells):  # there already: bring its text up to date
        for cell in nb.cells:
            if cell.get("id") == "your-turn-text" and cell.source != markdown(names):
                cell.source = markdown(names)
                nbformat.write(nb, path)
        return False
    heads = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
             and re.match(r"## (Check your understanding|Summary)", c.source.lstrip())]
    at = heads[0] if heads else len(nb.cells)
    code = nbformat.v4.new_code_cell(solution_source(names))
    code.metadata = {"tags": ["hide-cell"], "tfmini": {"exercise": names}}
    text = nbformat.v4.new_markdown_cell(markdown(names))
    text["id"], code["id"] = "your-turn-text", "your-turn-code"
    nb.cells[at:at] = [text, code]
    nbformat.write(nb, path)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 unless every chapter has its cell")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or sorted((ROOT / "chapters").glob("*.ipynb"))
    if args.check:
        wrong = []
        for path in paths:
            found = [exercise_names(c) for c in nbformat.read(path, as_version=4).cells if exercise_names(c)]
            if found != [EXERCISES[path.name[:2]]]:
                wrong.append(f"{path.name}: {found}")
        print("your turn: every chapter has its cell" if not wrong else "your turn: missing or wrong:\n  " + "\n  ".join(wrong))
        return 1 if wrong else 0
    for path in paths:
        print(f"{path.name}: {'added' if insert(path) else 'already there'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
