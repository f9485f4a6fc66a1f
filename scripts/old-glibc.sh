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
# preloaded. ./scripts/test.sh runs it; aarch64 needs the aarch64 std (rustup target add
# aarch64-unknown-linux-gnu), which this machine cannot fetch: the same command with
# --target aarch64-unknown-linux-gnu.2.17 builds it where it can (deploy/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-gnu.2.17
floor=2.17
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet ziglang cargo-zigbuild
PATH="$PWD/.venv/bin:$PATH" cargo zigbuild --locked --release -p npud-preload --target "$target" \
  --target-dir target/glibc217
lib=target/glibc217/x86_64-unknown-linux-gnu/release/libnpud_preload.so
newest=$(readelf -V --wide "$lib" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
echo "the interposer needs glibc $newest at most (floor $floor)"
if [[ "$(printf '%s\n%s\n' "$newest" "$floor" | sort -V | tail -1)" != "$floor" ]]; then
  readelf -V --wide "$lib" | grep -o 'GLIBC_[0-9.]*' | sort -uV
  echo "FAILED: $lib needs glibc $newest, newer than $floor"
  exit 1
fi
NPUD_TEST_PRELOAD="$PWD/$lib" cargo test -p npud-tests --locked --no-fail-fast \
  --test interposer --test install -- --test-threads "${NPUD_TEST_THREADS:-4}"
