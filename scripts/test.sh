#!/usr/bin/env bash
# Runs every test on a fresh machine: installs the Python clients the interop tests use into
# .venv, the Node.js ones into tests/node/node_modules, promtool and Chromium (apt), then lints and
# tests the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

# Reinstalled whenever tests/python/requirements.txt changes (its copy in .venv is the stamp).
if [ ! -x .venv/bin/python ] || ! cmp -s tests/python/requirements.txt .venv/requirements.txt; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
  cp tests/python/requirements.txt .venv/requirements.txt
fi
export CHARON_PYTHON="$PWD/.venv/bin/python"
# The Node.js clients (amqplib, rhea) go into tests/node/node_modules, reinstalled whenever
# tests/node/package-lock.json changes (its copy in node_modules is the stamp).
if [ ! -d tests/node/node_modules ] || ! cmp -s tests/node/package-lock.json tests/node/node_modules/.charon-package-lock.json; then
  (cd tests/node && npm ci --no-audit --no-fund --silent)
  cp tests/node/package-lock.json tests/node/node_modules/.charon-package-lock.json
fi
# promtool (Debian's `prometheus` package) checks a live scrape of the binary in
# tests/e2e_prometheus.rs; installed only when absent.
if ! command -v promtool >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
# Headless Chromium and chromedriver (Debian's `chromium`, `chromium-driver`) for the web UI's
# browser tests (tests/e2e_web_ui.rs); installed only when absent. With CHARON_REQUIRE_BROWSER
# those tests fail instead of skipping when the browser is missing.
if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
export CHARON_REQUIRE_BROWSER=1
# rabbitmqadmin v2, RabbitMQ's Rust CLI, for tests/e2e_rabbitmqadmin.rs: built once into a cache
# outside the checkout, and again only when the pinned version changes (the check costs nothing).
RABBITMQADMIN_VERSION=2.35.0
RABBITMQADMIN_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/charon-tests/rabbitmqadmin"
if [ "$("$RABBITMQADMIN_ROOT/bin/rabbitmqadmin" --version 2>/dev/null)" != "rabbitmqadmin $RABBITMQADMIN_VERSION" ]; then
  cargo install rabbitmqadmin --version "$RABBITMQADMIN_VERSION" --locked --root "$RABBITMQADMIN_ROOT"
fi
export CHARON_RABBITMQADMIN="$RABBITMQADMIN_ROOT/bin/rabbitmqadmin"
# A clean checkout gains nothing from incremental state, which would double the build on disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

cargo fmt --all --check
# The module graph: the script's own tests, then no import cycle in the crates a replicated queue
# builds on (a cycle there means no file can be read, or lifted out, on its own).
python3 scripts/test_use_graph.py
for crate in queue store model; do
  python3 scripts/use_graph.py "crates/$crate/src" --fail-on-cycles
done
# Too many arguments means a missing type: no allowance for clippy's lint (issue 40).
if grep -rn --include='*.rs' 'clippy::too_many_arguments' crates gateway conformance bench tests; then
  echo "a clippy::too_many_arguments allowance: group the arguments in a type instead" >&2
  exit 1
fi
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
