#!/usr/bin/env bash
# What the interposer adds to an unmodified CUDA program's start-up on a real GPU:
# tests/native/cuda_app (device attribute, primary context, 70 streams, teardown) started
# COUNT times each, bare, under `npuctl run`, and with only LD_PRELOAD set, interleaved;
# prints the medians and the ratios (docs/hardware.md records a run).
#
#   scripts/gpu/startup.sh BIN [COUNT]     BIN holds npud, npuctl and libnpud_preload.so
#
# CUDA_LIBRARY names the driver (default: libcuda.so.1 from the loader's cache).
set -u
bin=$(cd "${1:-target/release}" && pwd)
count=${2:-40}
repo=$(cd "$(dirname "$0")/../.." && pwd)
lib=${CUDA_LIBRARY:-$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sock=$work/npud.sock
cc -O1 -o "$work/cuda_app" "$repo/tests/native/cuda_app.c" "$lib" -ldl || exit 1
printf '[budget]\ncuda_streams_per_device = 1024\n' >"$work/npud.toml"
"$bin/npud" --socket "$sock" --state-dir "$work/state" --backend cuda --cuda-library "$lib" \
    --config "$work/npud.toml" 2>"$work/npud.log" &
npud_pid=$!
for _ in $(seq 300); do "$bin/npuctl" --socket "$sock" health >/dev/null 2>&1 && break; sleep 0.1; done
export NPUD_SOCKET=$sock
now() { date +%s%N; }
# One start-up of each kind, appending its microseconds to its file.
bare() { local a; a=$(now); "$work/cuda_app" 70 0 >/dev/null 2>&1 || echo "bare start-up failed" >&2; echo $((($(now) - a) / 1000)) >>"$work/bare"; }
run() { local a; a=$(now); "$bin/npuctl" --socket "$sock" run --streams 71 -- "$work/cuda_app" 70 0 >/dev/null 2>&1 || echo "npuctl run start-up failed" >&2; echo $((($(now) - a) / 1000)) >>"$work/run"; }
pre() { local a; a=$(now); LD_PRELOAD="$bin/libnpud_preload.so" NPUD_STREAMS=71 "$work/cuda_app" 70 0 >/dev/null 2>&1 || echo "preloaded start-up failed" >&2; echo $((($(now) - a) / 1000)) >>"$work/pre"; }
for _ in 1 2 3; do bare; run; pre; done # warm-up, not counted
rm -f "$work/bare" "$work/run" "$work/pre"
for _ in $(seq "$count"); do bare; run; pre; done
med() { sort -n "$1" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
b=$(med "$work/bare"); r=$(med "$work/run"); p=$(med "$work/pre")
echo "start-ups: $count of each, median µs: bare $b, npuctl run $r, LD_PRELOAD only $p"
awk -v b="$b" -v r="$r" -v p="$p" 'BEGIN {printf "ratio to bare: npuctl run %.3fx (its own exec included), LD_PRELOAD only %.3fx\n", r / b, p / b}'
kill "$npud_pid"; wait "$npud_pid"
