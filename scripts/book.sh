#!/usr/bin/env bash
# Build the book into _build/html: bash scripts/book.sh [extra jupyter-book build options]
# Notebooks are not executed here (execute_notebooks: 'off'): the site shows the committed outputs,
# the ones nbval checks. Any Sphinx warning fails the build (-W -n).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
jupyter-book build . -W -n --keep-going "$@"
echo "book: built into $(pwd)/_build/html (open _build/html/index.html)"
