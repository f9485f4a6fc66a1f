#!/usr/bin/env bash
# The whole test suite, as CI runs it. Installs nothing globally; needs only the Rust
# toolchain (cargo, rustfmt, clippy) that the machine ships.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== format"
cargo fmt --all --check
echo "== lint"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== build the binaries the end-to-end tests run"
cargo build --workspace --bins --locked
echo "== tests"
cargo test --workspace --locked -- --test-threads "${NPUD_TEST_THREADS:-4}"
