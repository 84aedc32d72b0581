#!/usr/bin/env bash
# Writes screenshots of the web UI's main pages to docs/screenshots/*.png: runs the browser
# tests (tests/e2e_web_ui.rs: the real binary, headless Chromium through chromedriver) with
# CHARON_SCREENSHOTS set, so each test saves the pages it visits. Needs Debian's `chromium`
# and `chromium-driver` (scripts/test.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
export CHARON_SCREENSHOTS="$PWD/docs/screenshots"
command -v chromedriver >/dev/null || { echo "chromedriver is missing: apt-get install chromium chromium-driver" >&2; exit 1; }
mkdir -p "$CHARON_SCREENSHOTS"
cargo test -p charon --test e2e_web_ui -- --test-threads=1
ls -l "$CHARON_SCREENSHOTS"
