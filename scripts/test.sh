#!/usr/bin/env bash
# Run every check of the course; fails on the first failing stage.
#   1. unit tests of tfmini and of the repository (pytest tests)
#   2. the same unit tests with the oldest versions that pyproject.toml allows (scripts/test_minimums.sh, .venv-min/)
#   3. every notebook as on Colab, checked by strict nbval in a reader's default run (scripts/colab_run.py
#      --nbval --full), and, in the same pool of workers, the chapters with studies run once more with
#      every study computed in full (TFMINI_FULL=1, asserts checked, outputs not compared): alone in an empty
#      folder, in a fresh environment with another torch than the pin, tfmini installed by the notebook's own
#      setup cell, each output compared with the committed one; one execution per notebook; then the
#      chapters whose run is under two minutes run twice in one kernel (scripts/run_twice.py)
#   4. the book build with warnings as errors
#   5. the browser test: every page of the built site opened in headless Chromium (installed by
#      scripts/chromium.sh when missing) and checked by scripts/browser_test.py
#
# bash scripts/test.sh --quick: a contributor's check in minutes, not the full run: the unit tests, the
# workflow files against their schema, and strict nbval (scripts/nbval_parallel.py, this environment)
# on the chapters that differ from origin/main (committed or not); nothing is installed beyond .venv.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [[ "${1:-}" == "--quick" ]]; then
    export HF_HUB_OFFLINE=1
    echo "== quick: python -m pytest tests -q"
    python -m pytest tests -q
    echo "== quick: check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml"
    check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
    TFMINI_BASE="$(git merge-base HEAD origin/main 2>/dev/null || git rev-parse HEAD)"
    mapfile -t TFMINI_CHANGED < <( { git diff --name-only "$TFMINI_BASE" -- 'chapters/*.ipynb'; \
        git ls-files --others --exclude-standard -- 'chapters/*.ipynb'; } | sort -u)
    if ((${#TFMINI_CHANGED[@]})); then
        echo "== quick: python scripts/nbval_parallel.py ${TFMINI_CHANGED[*]}"
        python scripts/nbval_parallel.py "${TFMINI_CHANGED[@]}"
    else
        echo "== quick: no chapter differs from $TFMINI_BASE"
    fi
    echo "quick: passed (the full run, bash scripts/test.sh, also checks the oldest versions, Colab, the book and the browser)"
    exit 0
elif [[ $# -gt 0 ]]; then
    echo "usage: bash scripts/test.sh [--quick]" >&2
    exit 2
fi
# Nothing is downloaded at run time: Hugging Face's libraries fail at once instead of trying the network.
export HF_HUB_OFFLINE=1

TFMINI_T0=$SECONDS
TFMINI_STAGE=""
TFMINI_STAGE_T0=$SECONDS

on_exit() {
    local rc=$?
    # the background installs started below, if they are still running
    kill $(jobs -p) 2>/dev/null || true
    if ((rc != 0)) && [[ -n "$TFMINI_STAGE" ]]; then
        echo
        echo "-- $TFMINI_STAGE: FAILED (exit $rc) after $((SECONDS - TFMINI_STAGE_T0)) s"
    fi
}
trap on_exit EXIT

stage() {
    echo
    echo "=============================================================================="
    echo "== $*"
    echo "=============================================================================="
    TFMINI_STAGE="$*"
    TFMINI_STAGE_T0=$SECONDS
}

stage_done() {
    echo "-- $1: passed in $((SECONDS - TFMINI_STAGE_T0)) s"
    TFMINI_STAGE=""
}

# The environments of stages 2 and 3 download a few GB (torch builds other than the pin): that network
# and disk work runs in the background, beside stages 1 and 2, and stages 2 and 3 wait for it.
TFMINI_LOGS="$(mktemp -d)"
# Chromium for stage 5 (apt-get, only when it is missing) installs beside them.
bash scripts/chromium.sh >"$TFMINI_LOGS/chromium.log" 2>&1 &
TFMINI_CHROMIUM_PID=$!
bash scripts/test_minimums.sh --install-only >"$TFMINI_LOGS/minimums.log" 2>&1 &
TFMINI_MINIMUMS_PID=$!
python scripts/colab_run.py --prepare >"$TFMINI_LOGS/colab.log" 2>&1 &
TFMINI_COLAB_PID=$!

# waits for a background install; shows its output, and fails the stage if it failed
wait_for() {
    local rc=0
    wait "$1" || rc=$?
    cat "$2"
    return "$rc"
}

stage "1/5 unit tests: python -m pytest tests -q; the workflow files against their schema"
python -m pytest tests -q
# the GitHub Actions workflows (.github/workflows) against their published schema (bundled: no network)
check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
stage_done "unit tests"

stage "2/5 minimum versions: bash scripts/test_minimums.sh (pytest tests with the oldest versions pyproject.toml allows)"
wait_for "$TFMINI_MINIMUMS_PID" "$TFMINI_LOGS/minimums.log"
bash scripts/test_minimums.sh
stage_done "minimum versions"

stage "3/5 notebooks: python scripts/colab_run.py --nbval --full --jobs 2 (each alone, as Colab runs it: default runs compared, studies computed)"
# Strict nbval, as on Colab. The kernels draw figures inline (no MPLBACKEND) and run on the AVX2 paths of
# PyTorch and MKL: trained numbers depend on the CPU's floating-point paths (AVX-512 and AVX2 kernels
# round differently), so an output that depends on them would pass on some machines and fail on others;
# on the AVX2 paths such an output fails everywhere, every time. Such cells are NBVAL_IGNORE_OUTPUT and
# assert what matters. Each notebook gets an empty checkpoint folder, as a Colab reader has.
wait_for "$TFMINI_COLAB_PID" "$TFMINI_LOGS/colab.log"
# In one pool of two workers, longest first: a reader's default run of every chapter, each output
# compared with the committed one (a study shows its recorded results, so what follows it prints exactly
# what the book's full execution printed), and every study computed in full (TFMINI_FULL=1), as the
# book's execution computes it: the chapters that have studies run to the end and every assert holds
# (their trained numbers can round differently on this CPU, so these outputs are not compared).
python scripts/colab_run.py --nbval --full --jobs 2
# A reader re-runs cells: every chapter whose default run is under two minutes runs "Run all" twice in
# one kernel, and the second run must raise nothing and print what the first printed.
python scripts/run_twice.py --under 120 --jobs 2
stage_done "notebooks"

stage "4/5 book: bash scripts/book.sh --all (warnings are errors)"
# From an empty _build/html: Sphinx keeps some pages of an earlier build (the source pages of
# tfmini's modules) when their inputs did not change, and stage 5 must see only this build's pages.
rm -rf _build/html
bash scripts/book.sh --all
stage_done "book"

stage "5/5 browser: python scripts/browser_test.py (every page of _build/html in headless Chromium)"
wait_for "$TFMINI_CHROMIUM_PID" "$TFMINI_LOGS/chromium.log"
python scripts/browser_test.py
stage_done "browser"

echo
echo "all stages passed in $((SECONDS - TFMINI_T0)) s"
