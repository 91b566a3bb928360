#!/usr/bin/env bash
# Make sure Debian's Chromium is installed for the browser test (scripts/browser_test.py):
#   bash scripts/chromium.sh
# Does nothing when /usr/bin/chromium exists; otherwise installs the Debian packages chromium and
# chromium-driver with apt-get (through sudo when not root). Playwright never downloads a browser.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium: /usr/bin/chromium is missing and apt-get is not available;" \
        "install Chromium so that /usr/bin/chromium runs it" >&2
    exit 1
fi
TFMINI_SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
    TFMINI_SUDO=(sudo)
fi
echo "chromium: installing Debian's chromium and chromium-driver (apt-get)"
"${TFMINI_SUDO[@]}" apt-get update -q
"${TFMINI_SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends chromium chromium-driver
/usr/bin/chromium --version
