#!/usr/bin/env bash
# Run every check of the course; fails on the first failing stage.
#   1. unit tests of tfmini and of the repository (pytest tests)
#   2. the same unit tests with the oldest versions that pyproject.toml allows (scripts/test_minimums.sh, .venv-min/)
#   3. strict nbval over every chapter: each notebook re-executed and compared with its committed outputs
#   4. every notebook as on Colab (scripts/colab_run.py): alone in an empty folder, in a fresh environment
#      with another torch than the pin, tfmini installed by the notebook's own setup cell
#   5. the book build with warnings as errors
#   6. the browser test: every page of the built site opened in headless Chromium (installed by
#      scripts/chromium.sh when missing) and checked by scripts/browser_test.py
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# Nothing is downloaded at run time: Hugging Face's libraries fail at once instead of trying the network.
export HF_HUB_OFFLINE=1

TFMINI_T0=$SECONDS
TFMINI_STAGE=""
TFMINI_STAGE_T0=$SECONDS

on_exit() {
    local rc=$?
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

stage "1/6 unit tests: python -m pytest tests -q"
python -m pytest tests -q
stage_done "unit tests"

stage "2/6 minimum versions: bash scripts/test_minimums.sh (pytest tests with the oldest versions pyproject.toml allows)"
bash scripts/test_minimums.sh
stage_done "minimum versions"

stage "3/6 notebooks: strict nbval over chapters/"
shopt -s nullglob
TFMINI_NOTEBOOKS=(chapters/*.ipynb)
shopt -u nullglob
if ((${#TFMINI_NOTEBOOKS[@]} == 0)); then
    echo "no notebooks in chapters/ yet: nothing to compare"
else
    # Kernels must draw figures inline as they did under scripts/execute.sh: no MPLBACKEND for them.
    # A fresh checkpoint folder: chapters may reuse models trained earlier in this run only.
    # Trained numbers depend on the CPU's floating-point paths (AVX-512 and AVX2 kernels round
    # differently), so a committed output that depends on them would pass on some machines and fail
    # on others. The kernels run on the AVX2 paths of PyTorch and MKL: on a machine with AVX-512,
    # where the outputs are usually written, every such output then fails here, every time.
    # Such cells are NBVAL_IGNORE_OUTPUT and assert what matters.
    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
    TFMINI_CACHE="$(mktemp -d)" env -u MPLBACKEND python -m pytest --nbval --nbval-current-env \
        --nbval-sanitize-with .ci/nbval_sanitize.cfg chapters/ -q -p no:cacheprovider
fi
stage_done "notebooks"

stage "4/6 Colab: python scripts/colab_run.py --jobs 2 (every notebook alone, as Colab runs it; two at a time)"
python scripts/colab_run.py --jobs 2
stage_done "Colab"

stage "5/6 book: bash scripts/book.sh --all (warnings are errors)"
# From an empty _build/html: Sphinx keeps some pages of an earlier build (the source pages of
# tfmini's modules) when their inputs did not change, and stage 6 must see only this build's pages.
rm -rf _build/html
bash scripts/book.sh --all
stage_done "book"

stage "6/6 browser: python scripts/browser_test.py (every page of _build/html in headless Chromium)"
bash scripts/chromium.sh
python scripts/browser_test.py
stage_done "browser"

echo
echo "all stages passed in $((SECONDS - TFMINI_T0)) s"
