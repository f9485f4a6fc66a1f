#!/usr/bin/env bash
# The whole test suite, as CI runs it. Needs the Rust toolchain (cargo, rustfmt, clippy)
# and python3; installs the Python test dependencies into ./.venv from PyPI.
#
# Every step runs even when an earlier one failed (only a failed build stops the run, since
# nothing after it could run), and cargo runs every test binary (--no-fail-fast), so one
# failure never hides another. The last lines name what failed and count the tests.
set -uo pipefail
cd "$(dirname "$0")/.."

threads="${NPUD_TEST_THREADS:-4}"
log="$(mktemp -t npud-test.XXXXXX)"
trap 'rm -f "$log"' EXIT
failed=()

# step NAME COMMAND...: runs COMMAND, echoing its output into the log that is counted.
step() {
  local name="$1"
  shift
  echo "== $name"
  if ! "$@" 2>&1 | tee -a "$log"; then
    failed+=("$name")
  fi
}

step "format" cargo fmt --all --check
step "lint" cargo clippy --workspace --all-targets --locked -- -D warnings
step "doc comments" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
# A real container runtime for tests/tests/containers.rs (issue 56): runc from Debian where
# this runs as root with apt and has none; the test skips loudly where it cannot run.
if [[ $(id -u) == 0 ]] && ! command -v runc >/dev/null && command -v apt-get >/dev/null; then
  echo "== installing runc for the real-container test"
  apt-get install -y --no-install-recommends runc >/dev/null 2>&1 ||
    { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends runc >/dev/null 2>&1; } ||
    echo "runc could not be installed: the real-container test will say it skipped"
fi
# A real container engine for tests/tests/dra_podman.rs (issue 77): podman applies the CDI
# spec npud writes for a DRA claim; the test skips loudly where it cannot run.
if [[ $(id -u) == 0 ]] && ! command -v podman >/dev/null && command -v apt-get >/dev/null; then
  echo "== installing podman for the CDI test"
  apt-get install -y --no-install-recommends podman >/dev/null 2>&1 ||
    { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends podman >/dev/null 2>&1; } ||
    echo "podman could not be installed: the CDI test will say it skipped"
fi
echo "== build the binaries and fake vendor libraries the end-to-end tests run"
if ! cargo build --workspace --locked; then
  echo "summary: the build failed; no tests ran"
  exit 1
fi
step "Rust tests" cargo test --workspace --locked --no-fail-fast -- --test-threads "$threads"
for backend in acl cuda; do
  step "conformance and callback suites on the $backend backend (fake library)" \
    env NPUD_TEST_BACKEND=$backend cargo test -p npud-tests --locked --no-fail-fast \
    --test semantics --test callbacks -- --test-threads "$threads"
done

step "the interposer for old glibc (2.17), built with cargo-zigbuild and tested" ./scripts/old-glibc.sh
step "the previous release's interposer against this npud" ./scripts/previous-interposer.sh

echo "== Python client"
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
if .venv/bin/python -m pip install --quiet --upgrade pip &&
  .venv/bin/python -m pip install --quiet -e 'client/python[test]'; then
  target_dir="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)"
  step "Python tests" env NPUD_BIN="$target_dir/debug/npud" .venv/bin/python -m pytest client/python/tests -q -p no:cacheprovider
else
  failed+=("Python dependencies")
fi

# Count cargo's "test result: ok. N passed; M failed" lines and pytest's "N passed, M failed".
passed=$(grep -hoE '[0-9]+ passed' "$log" | awk '{ n += $1 } END { print n + 0 }')
failures=$(grep -hoE '[0-9]+ failed' "$log" | awk '{ n += $1 } END { print n + 0 }')
echo
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
fi
echo "summary: $passed passed, $failures failed"
((${#failed[@]} == 0))
