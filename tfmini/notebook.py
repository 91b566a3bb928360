"""Small helpers for the course's notebooks.

:func:`glue` stores a value computed by the code so that the book's prose can quote it
(myst-nb's ``glue``); where myst-nb is not installed, as on Colab, it just shows the value.
"""
from __future__ import annotations

from typing import Any

__all__ = ["glue"]


def glue(name: str, value: Any, display: bool = False) -> None:
    """Record ``value`` under ``name`` for ``{glue:text}`name``` in the book's text.

    Args:
        name: the key the text refers to.
        value: the value to show (its text form is quoted).
        display: also show the value in the cell's output.
    """
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        if display:
            from IPython.display import display as show
            show(value)
        return
    myst_glue(name, value, display=display)
