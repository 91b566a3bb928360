"""Sphinx extension of the book: write each ``<script>`` of a page once.

Sphinx 7.4 keeps the inline scripts that extensions add after the HTML builder starts twice: once as
added (file name ``None``) and once more when it copies its registry into the page (file name ``''``),
and the two copies do not compare equal. sphinx-thebe's ``const THEBE_JS_URL = ...`` then runs twice,
and every page of the site raises "Identifier 'THEBE_JS_URL' has already been declared" in the
browser. This extension drops the second copy from each page's ``script_files``, so a page loads with
no JavaScript error (``scripts/browser_test.py`` checks it). It is listed under
``sphinx.local_extensions`` in ``_config.yml``.
"""

from __future__ import annotations

from typing import Any


def _key(script: Any) -> tuple:
    filename = getattr(script, "filename", script) or ""
    attributes = getattr(script, "attributes", {}) or {}
    return filename, getattr(script, "priority", 0), tuple(sorted((k, str(v)) for k, v in attributes.items()))


def unique_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen: set[tuple] = set()
    unique = []
    for script in scripts:
        key = _key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: the list is the builder's, which other handlers may still extend


def setup(app):
    # After every other handler of the event (default priority 500) has added its scripts.
    app.connect("html-page-context", unique_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
