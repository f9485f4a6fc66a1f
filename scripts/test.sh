#!/usr/bin/env bash
# The whole test suite, as CI runs it. Needs the Rust toolchain (cargo, rustfmt, clippy)
# and python3; installs the Python test dependencies into ./.venv from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== format"
cargo fmt --all --check
echo "== lint"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== build the binaries and fake vendor libraries the end-to-end tests run"
cargo build --workspace --locked
echo "== Rust tests"
cargo test --workspace --locked -- --test-threads "${NPUD_TEST_THREADS:-4}"
echo "== the conformance and callback suites against the vendor backends (fake libraries)"
for backend in acl cuda; do
  NPUD_TEST_BACKEND=$backend cargo test -p npud-tests --locked --test semantics --test callbacks -- --test-threads "${NPUD_TEST_THREADS:-4}"
done

echo "== Python client"
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e 'client/python[test]'
target_dir="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)"
NPUD_BIN="$target_dir/debug/npud" .venv/bin/python -m pytest client/python/tests -q
