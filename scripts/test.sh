#!/usr/bin/env bash
# Runs every test on a fresh machine: installs the Python clients the interop tests use into
# .venv, then lints and tests the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import pika' 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
fi
export CHARON_PYTHON="$PWD/.venv/bin/python"

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
