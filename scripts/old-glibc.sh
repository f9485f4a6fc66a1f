#!/usr/bin/env bash
# The interposer as it ships: a release build that runs in images with an old glibc
# (Ubuntu 20.04, UBI 8, openEuler 20.03, CentOS 7), since LD_PRELOAD (and
# /etc/ld.so.preload) load it into every process of the container, exec probes included.
# Rust std's floor, and aarch64's first glibc, is 2.17; Debian's toolchain links against
# its own 2.36, so the library is built with cargo-zigbuild against 2.17's symbols.
#
# Installs ziglang and cargo-zigbuild (PyPI) into ./.venv, builds the interposer for
# x86_64-unknown-linux-gnu.2.17, fails if its ELF needs any glibc symbol version newer
# than 2.17 (readelf), then runs the interposer's end-to-end suites with that very file
# preloaded. Then the same for aarch64 (Atlas A2/A3 hosts), built and checked the same way
# (the aarch64 std is added with rustup where it is missing; the step says it skipped where
# it cannot be); running it needs an aarch64 host or qemu-user (scripts/aarch64-check.sh).
# ./scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-gnu.2.17
floor=2.17

# Fails unless the ELF `$1` needs glibc $floor at most.
check_floor() {
  local newest
  newest=$(readelf -V --wide "$1" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  echo "$1 needs glibc $newest at most (floor $floor)"
  if [[ "$(printf '%s\n%s\n' "$newest" "$floor" | sort -V | tail -1)" != "$floor" ]]; then
    readelf -V --wide "$1" | grep -o 'GLIBC_[0-9.]*' | sort -uV
    echo "FAILED: $1 needs glibc $newest, newer than $floor"
    exit 1
  fi
}
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet ziglang cargo-zigbuild
PATH="$PWD/.venv/bin:$PATH" cargo zigbuild --locked --release -p npud-preload --target "$target" \
  --target-dir target/glibc217
lib=target/glibc217/x86_64-unknown-linux-gnu/release/libnpud_preload.so
check_floor "$lib"
if rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu ||
  rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1; then
  PATH="$PWD/.venv/bin:$PATH" cargo zigbuild --locked --release -p npud-preload \
    --target aarch64-unknown-linux-gnu.2.17 --target-dir target/glibc217
  arm=target/glibc217/aarch64-unknown-linux-gnu/release/libnpud_preload.so
  readelf -h "$arm" | grep -q AArch64 || { echo "FAILED: $arm is not an aarch64 ELF"; exit 1; }
  check_floor "$arm"
else
  echo "SKIPPED LOUDLY: no aarch64 std (rustup target add aarch64-unknown-linux-gnu failed); the aarch64 interposer was not built"
fi
NPUD_TEST_PRELOAD="$PWD/$lib" cargo test -p npud-tests --locked --no-fail-fast \
  --test interposer --test install -- --test-threads "${NPUD_TEST_THREADS:-4}"
