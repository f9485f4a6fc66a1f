#!/usr/bin/env bash
# An interposer of the previous release against this npud: pods keep running across an
# npud upgrade with the library they mapped at their start, so this npud must admit it.
# Builds the interposer of PREVIOUS (the last commit that landed before the budget wire
# last changed; default below) from this repository's history in a worktree of its own,
# then runs the interposer, books and Kubernetes suites with that library preloaded
# (NPUD_TEST_PRELOAD). ./scripts/test.sh runs it; a clone without that history (shallow)
# skips it, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
previous=${PREVIOUS:-f170db9}
if ! git cat-file -e "$previous^{commit}" 2>/dev/null; then
  echo "SKIPPED LOUDLY: commit $previous is not in this clone's history (shallow?); the previous release's interposer was not tested"
  exit 0
fi
work=target/previous
rm -rf "$work/src"
git worktree prune
git worktree add --force --detach "$work/src" "$previous" >/dev/null
trap 'git worktree remove --force "$work/src" >/dev/null 2>&1 || true' EXIT
(cd "$work/src" && cargo build --quiet --locked -p npud-preload --target-dir "$PWD/../build")
lib=$PWD/$work/build/debug/libnpud_preload.so
echo "the interposer of $previous: $lib"
NPUD_TEST_PRELOAD="$lib" cargo test -p npud-tests --locked --no-fail-fast \
  --test interposer --test books --test kubernetes -- --test-threads "${NPUD_TEST_THREADS:-4}"
