"""Read a chapter's configuration from its own code cells, so that a diagram uses the chapter's numbers.

A diagram that labels tensor shapes takes the sizes (batch, lengths, widths, heads) from the chapter it
illustrates: :func:`assigned` finds an assignment such as ``B, T, d, H = 2, 5, 12, 3`` in the chapter's
code and evaluates its right-hand side; :func:`call_keywords` finds a call such as
``tfmini.TransformerConfig(..., d_model=64, ...)`` and returns its literal keyword arguments. Only
literals are evaluated (and ``"a b c".split()``, ``dict(...)`` and ``len(...)`` of those), never the
chapter's code. If a chapter stops assigning what a diagram reads, the error says which.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"


def chapter_path(number: int) -> Path:
    """``chapters/NN_*.ipynb`` for chapter ``number``."""
    found = sorted(CHAPTERS.glob(f"{number:02d}_*.ipynb"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one notebook chapters/{number:02d}_*.ipynb, found {found}")
    return found[0]


@functools.cache
def _code(number: int) -> tuple[ast.Module, ...]:
    """The parsed code cells of a chapter (IPython magics and shell lines read as ``pass``)."""
    nb = nbformat.read(chapter_path(number), as_version=4)
    trees = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            lines = [line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
                     for line in cell.source.splitlines()]
            trees.append(ast.parse("\n".join(lines)))
    return tuple(trees)


def _value(node: ast.AST) -> Any:
    """The value of a literal expression, ``"...".split()``, ``dict(k=literal, ...)`` or ``len(literal)``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split" \
            and isinstance(node.func.value, ast.Constant) and not node.args:
        return node.func.value.value.split()
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {kw.arg: _value(kw.value) for kw in node.keywords}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" and len(node.args) == 1:
        return len(_value(node.args[0]))
    if isinstance(node, ast.Tuple):
        return tuple(_value(element) for element in node.elts)
    if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
        return {_value(key): _value(value) for key, value in zip(node.keys, node.values)}
    return ast.literal_eval(node)


def _written(target: ast.AST) -> str:
    """An assignment target as the chapter writes it: ``B, T, d, H`` rather than ``(B, T, d, H)``."""
    if isinstance(target, ast.Tuple):
        return ", ".join(ast.unparse(element) for element in target.elts)
    return ast.unparse(target)


def assigned(number: int, target: str, occurrence: int = 0) -> Any:
    """The value that chapter ``number`` assigns to ``target`` (as written, e.g. ``"B, T, d, H"``).

    ``occurrence`` picks among several assignments to the same names, in the order of the chapter.
    A tuple target gives a tuple of values.
    """
    found = [node.value for tree in _code(number) for node in ast.walk(tree)
             if isinstance(node, ast.Assign) and len(node.targets) == 1
             and _written(node.targets[0]) == target]
    if len(found) <= occurrence:
        raise LookupError(f"chapter {number} has {len(found)} assignment(s) to {target!r}, "
                          f"a diagram reads number {occurrence + 1}")
    return _value(found[occurrence])


def slice_stop(number: int, target: str, occurrence: int = 0) -> int:
    """How many rows chapter ``number`` keeps when it assigns ``target = x[:n]`` (or ``a, b = x[:n], y[:n]``,
    or ``x[:n].cpu()``: method calls on the slice are looked through)."""
    found = [node.value for tree in _code(number) for node in ast.walk(tree)
             if isinstance(node, ast.Assign) and len(node.targets) == 1 and _written(node.targets[0]) == target]
    if len(found) <= occurrence:
        raise LookupError(f"chapter {number} has {len(found)} assignment(s) to {target!r}, "
                          f"a diagram reads number {occurrence + 1}")
    value = found[occurrence]
    first = value.elts[0] if isinstance(value, ast.Tuple) else value
    while isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute):  # x[:n].cpu(), x[:n].to(d)
        first = first.func.value
    if not (isinstance(first, ast.Subscript) and isinstance(first.slice, ast.Slice) and first.slice.upper is not None):
        raise LookupError(f"chapter {number}: {target} = {ast.unparse(value)} is no longer a slice x[:n]")
    return ast.literal_eval(first.slice.upper)


def call_arguments(number: int, function: str, occurrence: int = 0) -> tuple[list[Any], dict[str, Any]]:
    """The literal arguments of a call to ``function`` (its last dotted name) in chapter ``number``.

    Returns the positional arguments (``None`` where one is not a literal, such as ``len(vocab)``) and
    the keyword arguments (those that are not literals are left out).
    """
    def matches(tree: ast.Module) -> list[ast.Call]:
        found = [node for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == function]
        return sorted(found, key=lambda node: (node.lineno, node.col_offset))

    calls = [node for tree in _code(number) for node in matches(tree)]
    if len(calls) <= occurrence:
        raise LookupError(f"chapter {number} has {len(calls)} call(s) to {function}, "
                          f"a diagram reads number {occurrence + 1}")
    args, keywords = [], {}
    for arg in calls[occurrence].args:
        try:
            args.append(_value(arg))
        except ValueError:
            args.append(None)
    for kw in calls[occurrence].keywords:
        try:
            keywords[kw.arg] = _value(kw.value)
        except ValueError:
            continue
    return args, keywords


def call_keywords(number: int, function: str, occurrence: int = 0) -> dict[str, Any]:
    """The literal keyword arguments of a call (see :func:`call_arguments`)."""
    return call_arguments(number, function, occurrence)[1]
