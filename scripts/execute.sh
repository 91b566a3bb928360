#!/usr/bin/env bash
# Regenerate notebook outputs: bash scripts/execute.sh [notebook ...]  (default: every chapters/*.ipynb)
# Outputs in the repository come only from this command.
set -euo pipefail
# Paths given relative to the caller's directory stay valid after env.sh moves to the repository root.
TFMINI_ARGS=()
for arg in "$@"; do
    if [[ "$arg" != -* && -e "$arg" ]]; then
        TFMINI_ARGS+=("$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")")
    else
        TFMINI_ARGS+=("$arg")
    fi
done
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
python scripts/execute.py ${TFMINI_ARGS[@]+"${TFMINI_ARGS[@]}"}
# The Colab copies (colab/, which the site's Colab buttons open), from the notebooks just written.
python scripts/colab.py
