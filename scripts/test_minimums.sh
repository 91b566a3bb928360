#!/usr/bin/env bash
# Run the unit tests (pytest tests) with the oldest versions of tfmini's dependencies that
# pyproject.toml allows, in a separate environment .venv-min/, so that its minimum versions stay true.
#
# The versions are read from pyproject.toml, never written here: every entry of [project] dependencies
# and of the [test] extra must read "name>=X.Y" (or "name>=X.Y.Z"), and is installed as
#   name>=X.Y    ->  name~=X.Y.0   the newest X.Y.* release (torch>=2.1 -> 2.1.2, numpy>=1.24 -> 1.24.4:
#                                  a minor series' bug-fix releases are what a user of it gets)
#   name>=X      ->  name~=X.0.0   the newest X.0.* release
#   name>=X.Y.Z  ->  name==X.Y.Z   exactly
# in one pip call, so their own dependencies resolve against those versions; then tfmini itself
# (pip install --no-deps -e .). torch comes from PyPI with its CUDA libraries (about 3 GB to download,
# 5 GB on disk; old torch releases do not import without them). The install runs again only when
# pyproject.toml or the Python version changes (a hash in .venv-min/.tfmini-minimums.sha256, as
# scripts/env.sh does for .venv); delete .venv-min after changing how this script installs.
#
# Needs Python 3.11 (tomllib; the oldest torch allowed has no wheels for newer Pythons).
#
#   bash scripts/test_minimums.sh                 # install when needed, then run the tests
#   bash scripts/test_minimums.sh --install-only  # only the install (scripts/test.sh starts it early)
set -euo pipefail

INSTALL_ONLY=0
case "${1:-}" in
    "") ;;
    --install-only) INSTALL_ONLY=1 ;;
    *) echo "minimums: expected no argument or --install-only, got '$1'" >&2; exit 2 ;;
esac

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=.venv-min

if command -v python3.11 >/dev/null 2>&1; then
    PY=python3.11
else
    PY=python3
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "minimums: expected Python 3.11 (python3.11 or python3), got $("$PY" --version 2>&1)" >&2
    exit 1
fi

# name>=version -> the pip requirement of the oldest allowed release, one per line
mapfile -t REQUIREMENTS < <("$PY" - <<'EOF'
import re, sys, tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for req in project["dependencies"] + project["optional-dependencies"]["test"]:
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*(\d+(?:\.\d+){0,2})\s*", req)
    if not m:
        sys.exit(f"minimums: pyproject.toml: expected 'name>=version' (X, X.Y or X.Y.Z), got {req!r}")
    name, version = m.groups()
    parts = version.split(".")
    if len(parts) == 3:
        print(f"{name}=={version}")
    else:
        print(f"{name}~={'.'.join((parts + ['0'])[:2])}.0")
EOF
)

HASH="$(cat pyproject.toml <("$PY" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
STAMP="$VENV/.tfmini-minimums.sha256"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" ]]; then
    echo "minimums: $VENV is up to date (delete it to reinstall)"
else
    echo "minimums: creating $VENV with $("$PY" --version 2>&1) and installing: ${REQUIREMENTS[*]}"
    T0=$SECONDS
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    LOG="$(mktemp)"
    if ! { "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q "${REQUIREMENTS[@]}" &&
           "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q --no-deps -e .; } \
            >"$LOG" 2>&1; then
        cat "$LOG" >&2
        rm -f "$LOG"
        echo "minimums: pip install failed" >&2
        exit 1
    fi
    rm -f "$LOG"
    echo "$HASH" >"$STAMP"
    echo "minimums: installed in $((SECONDS - T0)) s"
fi
if ((INSTALL_ONLY)); then
    exit 0
fi

# shellcheck disable=SC1091
source "$VENV/bin/activate"
export PYTHONHASHSEED=0
export MPLBACKEND=Agg
python - <<'EOF'
from importlib.metadata import version
import re, sys, tomllib

reqs = tomllib.load(open("pyproject.toml", "rb"))["project"]
names = [re.split(r"[<>=~ ]", r)[0] for r in reqs["dependencies"] + reqs["optional-dependencies"]["test"]]
print(f"minimums: Python {sys.version.split()[0]},", ", ".join(f"{n} {version(n)}" for n in names))
EOF
T0=$SECONDS
python -m pytest tests -q -p no:cacheprovider
echo "minimums: tests passed in $((SECONDS - T0)) s"
