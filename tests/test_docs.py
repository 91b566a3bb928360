"""The API reference is complete: every public tfmini object is on appendix/api.md and documents its
arguments, what it returns, and the shapes of the tensors it takes or gives.

Public objects are the names each module lists in ``__all__`` (autodoc's ``:members:`` documents
exactly those) and the names ``import tfmini`` exposes. Docstrings are Google style, read by
Sphinx's napoleon:

- ``Args:`` names every parameter (``a, b:`` or ``a / b:`` may describe two at once;
  ``**kwargs:`` and ``*args:`` count too); for a class, the parameters of its constructor (a dataclass may use
  ``Attributes:`` for its fields);
- ``Returns:`` (or ``Yields:``) for a function that returns something;
- where tensors are involved (a ``torch.Tensor`` in the signature, or a class that is an
  ``nn.Module``): a ``Shape:`` section, or the shapes written out in code, such as ````(B, T, D)````.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest
from torch import nn

import tfmini

ROOT = Path(__file__).resolve().parent.parent
API_PAGE = ROOT / "appendix" / "api.md"

SECTION = re.compile(r"^(?P<indent>[ \t]*)(?P<name>[A-Z][A-Za-z ]*):[ \t]*$", re.MULTILINE)
# A shape written out in code: ``(B, T, D)``, ``(max_len, d_model)``, ``(N,)``, ``(..., S)``.
SHAPE_TUPLE = re.compile(r"``\([^`()]*\)``")


def modules() -> list:
    names = [m.name for m in pkgutil.iter_modules(tfmini.__path__) if not m.name.startswith("_")]
    return [importlib.import_module(f"tfmini.{name}") for name in sorted(names)]


def public_objects() -> list[tuple[str, object]]:
    objects = []
    for module in modules():
        names = getattr(module, "__all__", None)
        if names is None:
            names = [n for n, o in vars(module).items()
                     if not n.startswith("_") and (inspect.isfunction(o) or inspect.isclass(o))
                     and o.__module__ == module.__name__]
        # Functions and classes; constants are documented in their module's text.
        objects += [(f"{module.__name__}.{name}", getattr(module, name)) for name in names
                    if inspect.isfunction(getattr(module, name)) or inspect.isclass(getattr(module, name))]
    return objects


def sections(doc: str) -> dict[str, str]:
    """Google-style sections of a docstring: header -> indented body."""
    found = {}
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        match = SECTION.fullmatch(line)
        if not match:
            continue
        indent = len(match["indent"].expandtabs())
        body = []
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            body.append(following)
        found[match["name"]] = "\n".join(body)
    return found


def documented_params(args_section: str) -> set[str]:
    names = set()
    for entry in re.findall(r"^\s*([*\w][\w,/ *]*?)(?:\s*\([^)]*\))?:", args_section, re.MULTILINE):
        names.update(n.strip().lstrip("*") for n in re.split(r"[,/]", entry))
    return names


def parameters(obj) -> list[inspect.Parameter]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    return [p for name, p in signature.parameters.items() if name not in ("self", "cls")]


def involves_tensors(obj) -> bool:
    if inspect.isclass(obj):
        return issubclass(obj, nn.Module)
    signature = inspect.signature(obj)
    annotations = [str(p.annotation) for p in signature.parameters.values()] + [str(signature.return_annotation)]
    # A tensor taken or returned, not one that a callable argument deals with.
    return any("Tensor" in a and "Callable" not in a for a in annotations)


def returns_something(obj) -> bool:
    annotation = inspect.signature(obj).return_annotation
    return annotation not in (None, "None", type(None))


OBJECTS = public_objects()


def test_every_public_object_is_listed():
    names = [name for name, _ in OBJECTS]
    assert len(names) > 30, names
    # Top-level names are the same objects as in their modules, so the API page documents them.
    documented = {id(obj) for _, obj in OBJECTS}
    exposed = [n for n, o in vars(tfmini).items()
               if not n.startswith("_") and (inspect.isfunction(o) or inspect.isclass(o))]
    missing = [n for n in exposed if id(getattr(tfmini, n)) not in documented]
    assert not missing, f"tfmini.{missing} are not in the __all__ of the module that defines them"


@pytest.mark.parametrize("module", modules(), ids=lambda m: m.__name__)
def test_module_is_on_the_api_page(module):
    page = API_PAGE.read_text(encoding="utf-8")
    assert re.search(rf"^\.\. automodule:: {re.escape(module.__name__)}\s*\n\s+:members:", page, re.MULTILINE), (
        f"appendix/api.md has no '.. automodule:: {module.__name__}' with ':members:'"
    )
    assert (module.__doc__ or "").strip(), f"{module.__name__} has no module docstring"
    exported = getattr(module, "__all__", None)
    if exported is not None:
        defined = [n for n, o in vars(module).items()
                   if not n.startswith("_") and (inspect.isfunction(o) or inspect.isclass(o))
                   and o.__module__ == module.__name__]
        hidden = [n for n in defined if n not in exported]
        assert not hidden, (f"{module.__name__}: public {hidden} missing from __all__, so not on the API page "
                            "(list them, or give them a leading underscore)")


@pytest.mark.parametrize("name, obj", OBJECTS, ids=[name for name, _ in OBJECTS])
def test_docstring_documents_args_returns_and_shapes(name, obj):
    doc = inspect.cleandoc(obj.__doc__ or "")
    assert doc, f"{name} has no docstring"
    found = sections(doc)
    problems = []

    params = parameters(obj)
    if params:
        args = found.get("Args", "")
        if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
            args += "\n" + found.get("Attributes", "")
        if not args:
            problems.append("no 'Args:' section" + (" (or 'Attributes:')" if dataclasses.is_dataclass(obj) else ""))
        else:
            missing = [p.name for p in params if p.name not in documented_params(args)]
            if missing:
                problems.append(f"'Args:' does not describe {missing}")

    if inspect.isfunction(obj) and returns_something(obj) and not ({"Returns", "Yields"} & found.keys()):
        problems.append("no 'Returns:' section")

    if involves_tensors(obj):
        text = doc
        forward = getattr(obj, "forward", None) if inspect.isclass(obj) else None
        if forward is not None and forward.__doc__:
            text += "\n" + inspect.cleandoc(forward.__doc__)
        if "Shape" not in sections(text) and not SHAPE_TUPLE.search(text):
            problems.append("tensors are involved but no 'Shape:' section and no shape such as ``(B, T, D)``")

    assert not problems, f"{name}: " + "; ".join(problems)


# Chapters name what they add to tfmini in an "Added to tfmini" section, as cross-references to this
# API page: {py:func}`tfmini.masks.causal_mask`, or {py:class}`shown text <tfmini.layers.EncoderLayer>`.
ADDED_SECTION = re.compile(r"^#{1,6}\s+Added to `?tfmini`?.*?(?=^#{1,6}\s|\Z)", re.MULTILINE | re.DOTALL)
PLAIN_NAME = re.compile(r"(?<![}`])`(tfmini(?:\.[A-Za-z_]\w*)+)(?:\(\))?`(?!`)")
PY_ROLE = re.compile(r"\{py:\w+\}`(?:[^`<]*<)?~?(?P<target>tfmini[\w.]*)>?`")
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


def documented_names() -> set[str]:
    names = {module.__name__ for module in modules()}
    names.update(f"{module.__name__}.{n}" for module in modules() for n in getattr(module, "__all__", ()))
    for name, obj in OBJECTS:
        names.add(name)
        if inspect.isclass(obj):
            names.update(f"{name}.{member}" for member in vars(obj) if not member.startswith("_"))
    return names


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_chapter_links_what_it_adds_to_the_api_page(path):
    import nbformat

    text = "\n\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    sections = ADDED_SECTION.findall(text)
    assert sections, f"{path.name} has no 'Added to tfmini' section"
    plain = [m.group(1) for s in sections for m in PLAIN_NAME.finditer(s)]
    assert not plain, f"{path.name}: {plain} in 'Added to tfmini' should be cross-references to the API page"
    known = documented_names()
    unknown = [m["target"] for m in PY_ROLE.finditer(text) if m["target"] not in known]
    assert not unknown, f"{path.name}: {unknown} are not on the API page (documented names are module paths)"
