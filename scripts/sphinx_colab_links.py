"""Sphinx extension of the book: the Colab button of a chapter opens its Colab copy, ``colab/<chapter>.ipynb``.

sphinx-book-theme's launch button opens the page's own source, ``chapters/<chapter>.ipynb``, whose MyST
(citations, glued numbers, cross-references, admonitions) Colab shows as raw text. ``scripts/colab.py``
writes copies with all of it resolved into plain Markdown; this handler, run after the theme's
(priority 501), points each Colab button there. It is listed under ``sphinx.local_extensions`` in
``_config.yml``; ``scripts/browser_test.py`` checks the links.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from colab import COLAB  # scripts/colab.py, beside this file (local_extensions puts scripts/ on sys.path)


def colab_links(app, pagename: str, templatename: str, context: dict[str, Any], doctree) -> None:
    colab_url = app.config.html_theme_options.get("launch_buttons", {}).get("colab_url", "").rstrip("/")
    if not colab_url or not pagename.startswith("chapters/"):
        return
    source, copy = f"/{pagename}.ipynb", f"/{COLAB}/{PurePosixPath(pagename).name}.ipynb"
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []):
            url = button.get("url", "")
            if url.startswith(f"{colab_url}/") and url.endswith(source):
                button["url"] = url.removesuffix(source) + copy


def setup(app):
    app.connect("html-page-context", colab_links, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
