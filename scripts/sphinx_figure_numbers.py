"""Sphinx extension of the book: figures are numbered by chapter, "Figure 5.2" for the second of chapter 5.

With ``numfig`` on and no numbered table of contents, Sphinx numbers the figures of the whole book in
one sequence, so chapter 5 would open at "Figure 9". After Sphinx has assigned its numbers (the
``env-get-updated`` event, priority 900, after the table-of-contents collector at 500), this handler
renumbers each page's figures in their order on the page: ``(chapter, k)`` on a chapter page
(``chapters/NN_name``), ``(k,)`` on any other page. ``{numref}`` and the captions then read "Figure 5.2";
``scripts/colab.py`` writes the same numbers into the Colab copies (:func:`figure_number`).
"""

from __future__ import annotations

import re

CHAPTER = re.compile(r"^chapters/(\d+)_")


def figure_number(page: str, k: int) -> str:
    """The number of the ``k``-th figure (from 1) of ``page`` (``chapters/05_multi_head_attention``)."""
    chapter = CHAPTER.match(page)
    return f"{int(chapter.group(1))}.{k}" if chapter else str(k)


def renumber(app, env) -> list[str]:
    changed = []
    for docname, numbers in env.toc_fignumbers.items():
        figures = numbers.get("figure")
        if not figures:
            continue
        in_order = sorted(figures, key=figures.get)  # Sphinx numbered them in the order of the page
        renumbered = {figure_id: tuple(int(part) for part in figure_number(docname, k).split("."))
                      for k, figure_id in enumerate(in_order, start=1)}
        if renumbered != figures:
            numbers["figure"] = renumbered
            changed.append(docname)
    return changed


def setup(app):
    app.connect("env-get-updated", renumber, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
