#!/usr/bin/env bash
# Runs the interposer as Ascend hosts do (aarch64, Kunpeng) without one: the interposer, the
# fake libascendcl and C test programs built for aarch64 run under qemu-user against an
# x86_64 npud, all on one shared fake device. CI does not run it (it needs a cross target);
# docs/interposer.md says what it showed. Needs:
#
#   rustup target add aarch64-unknown-linux-gnu
#   apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
#   cargo build --workspace            # the x86_64 npud, npuctl and fake it runs against
#   scripts/aarch64-check.sh
#
# Prints one pass/FAIL line per check; exits non-zero when any failed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
host=$repo/target/debug
work=$(mktemp -d)
trap 'kill "$npud" 2>/dev/null; rm -rf "$work"' EXIT
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
cargo build -q -p npud-preload -p fake-ascendcl --target aarch64-unknown-linux-gnu \
    --target-dir "$repo/target/aarch64-check" || exit 1
arm=$repo/target/aarch64-check/aarch64-unknown-linux-gnu/debug
for p in dlsym_probe acl_wrapped; do
    aarch64-linux-gnu-gcc -O1 -o "$work/$p" "$repo/tests/native/$p.c" -L"$arm" -lascendcl -ldl || exit 1
done
aarch64-linux-gnu-gcc -O1 -shared -fPIC -o "$work/libnext_wrapper.so" "$repo/tests/native/next_wrapper.c" -ldl || exit 1

export NPU_SIM_SHARED=$work/budget NPU_SIM_DEVICES=1 NPUD_SOCKET=$work/npud.sock
"$host/npud" --backend acl --acl-library "$host/libascendcl.so" --state-dir "$work/state" 2>"$work/npud.log" &
npud=$!
for _ in $(seq 50); do [[ -S $NPUD_SOCKET ]] && break; sleep 0.1; done
failed=0
verdict() { # verdict NAME EXPECTED ACTUAL
    if [[ $2 == "$3" ]]; then echo "pass  $1"; else echo "FAIL  $1: expected '$2', got '$3'"; failed=1; fi
}
# run PRELOADS PROGRAM ARG CREATED: the aarch64 program under qemu, holding its streams
# until npud counts CREATED of them (or 20 s pass); prints the program's first line, then
# what npud counts it created and what is untracked on the device.
run() {
    local fifo=$work/in.$RANDOM created=0 line=""
    mkfifo "$fifo"
    qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH="$arm" -E LD_PRELOAD="$1" \
        -E ACL_APP_LIBRARY="$arm/libascendcl.so" -E NPU_SIM_SHARED="$NPU_SIM_SHARED" \
        -E NPU_SIM_DEVICES=1 -E NPUD_SOCKET="$NPUD_SOCKET" "$work/$2" "$3" <"$fifo" >"$work/out" &
    local app=$!
    exec 9>"$fifo"
    for _ in $(seq 200); do
        line=$(head -n1 "$work/out")
        created=$("$host/npuctl" -o json status | jq -r '[.native_holders[].created] | add // 0')
        [[ -n $line && $created == "$4" ]] && break
        sleep 0.1
    done
    echo "$line"
    echo "$created"
    "$host/npuctl" -o json device list | jq -r '.[0].untracked'
    exec 9>&-
    wait "$app"
    rm -f "$fifo"
}
preload=$arm/libnpud_preload.so
mapfile -t r < <(run "$preload" dlsym_probe 5 6)
verdict "dlsym_probe: no vendor name before loading, hooks after" "ok 5" "${r[0]}"
verdict "dlsym_probe: npud counts the default stream and 5" 6 "${r[1]}"
mapfile -t r < <(run "$work/libnext_wrapper.so $preload" acl_wrapped 3 4)
verdict "a wrapper before npud's library sees every call" "ok 3 wrapped 3 3" "${r[0]}"
verdict "  and its streams are admitted" "4 0" "${r[1]} ${r[2]}"
mapfile -t r < <(run "$preload $work/libnext_wrapper.so" acl_wrapped 3 4)
verdict "a wrapper after npud's library runs (RTLD_NEXT from it)" "ok 3 wrapped 0 3" "${r[0]}"
verdict "  and the streams are admitted" "4 0" "${r[1]} ${r[2]}"
for _ in $(seq 100); do
    in_use=$("$host/npuctl" -o json device list | jq -r '.[0].in_use')
    [[ $in_use == 0 ]] && break
    sleep 0.1
done
verdict "everything back" 0 "$in_use"
exit $failed
