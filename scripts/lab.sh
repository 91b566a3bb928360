#!/usr/bin/env bash
# Open the chapters in JupyterLab, in the course environment (scripts/env.sh creates it on first use):
#     bash scripts/lab.sh            # then open the URL it prints
#     bash scripts/lab.sh --no-browser --port 8889   # extra options go to jupyter lab
# The kernel is the environment's own Python, with tfmini installed in editable mode: a change to
# tfmini/ shows after a kernel restart. To compute every slow study as the book does, start it as
#     TFMINI_FULL=1 bash scripts/lab.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec jupyter lab --notebook-dir="$(pwd)" --LabApp.default_url=/lab/tree/chapters "$@"
