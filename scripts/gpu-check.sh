#!/usr/bin/env bash
# Validates npud on a real NVIDIA GPU, end to end, and prints what it measured
# (docs/hardware.md records a run). Needs the driver, a C compiler and built binaries:
#
#   cargo build --release --workspace --bins
#   cargo test --release -p npud-tests --test semantics --test callbacks --no-run   # optional
#   scripts/gpu-check.sh target/release
#
# BIN (the first argument) holds npud, npuctl and libnpud_preload.so, and optionally deps/
# with the suites' test executables, which then run against the GPU. CUDA_LIBRARY names
# the driver (default: libcuda.so.1 from the loader's cache). Python checks run when
# python3 can import grpc, torch and cuda.core.
set -uo pipefail
bin=$(cd "${1:-target/release}" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
lib=${CUDA_LIBRARY:-$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')}
work=$(mktemp -d)
# Everything the check writes goes here; what it found is printed, so nothing is kept.
trap 'rm -rf "$work"' EXIT
sock=$work/npud.sock
ctl() { "$bin/npuctl" --socket "$sock" "$@"; }
section() { printf '\n== %s\n' "$*"; }
# One line per check, collected for the summary at the end.
verdicts=()
expect() { # expect NAME PATTERN OUTPUT
    if grep -qE "$2" <<<"$3"; then verdicts+=("pass  $1"); else verdicts+=("FAIL  $1: ${3//$'\n'/ | }"); fi
}
reject() { # reject NAME PATTERN OUTPUT: the check fails when OUTPUT matches
    if grep -qE "$2" <<<"$3"; then verdicts+=("FAIL  $1: ${3//$'\n'/ | }"); else verdicts+=("pass  $1"); fi
}
# says_ok PROGRAM BARE INTERPOSED: PROGRAM prints "ok" on the bare driver (the check named
# BARE) and under npuctl run (INTERPOSED).
says_ok() {
    local out
    out=$("$work/$1" 2>&1); echo "$out"
    expect "$2" '^ok' "$out"
    out=$(ctl run -- "$work/$1" 2>&1); echo "$out"
    expect "$3" '^ok' "$out"
}

section hardware
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "driver library: $lib"
[[ -e $lib ]] || { echo "no libcuda.so.1 found; set CUDA_LIBRARY"; exit 1; }

section "C programs built against the real driver"
for p in cuda_app cuda_callbacks cuda_default_stream cuda_edges cuda_create_cost cuda_priorities cuda_green \
    cuda_green_edges cuda_basics cuda_value_ops; do
    cc -O1 -pthread -o "$work/$p" "$repo/tests/native/$p.c" "$lib" -ldl || exit 1
done
for p in cuda_app cuda_green; do
    cc -O1 -DUSE_PROC_ADDRESS -o "$work/${p}_pa" "$repo/tests/native/$p.c" -ldl || exit 1
done
echo built

section "the interposer as it ships: built against glibc 2.17's symbols"
newest=$(readelf -V --wide "$bin/libnpud_preload.so" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
echo "the interposer needs glibc ${newest:-?} at most"
expect "the interposer needs no glibc newer than 2.17" '^2\.(1[0-7]|[0-9])(\.[0-9]+)?$' "$newest"

section "compute mode (npud serves any; this check leaves the GPU's as it is: Default)"
mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader); echo "$mode"
expect "the GPU is in the Default compute mode" 'Default' "$mode"
used_before=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | paste -sd' ')

section "npud on the cuda backend"
printf '[budget]\ncuda_streams_per_device = 256\n' >"$work/npud.toml"
"$bin/npud" --socket "$sock" --state-dir "$work/state" --backend cuda --cuda-library "$lib" \
    --config "$work/npud.toml" 2>"$work/npud.log" &
npud_pid=$!
for _ in $(seq 300); do ctl health >/dev/null 2>&1 && break; sleep 0.1; done
out=$(ctl -o json device list); echo "$out"
expect "npud serves the GPU's budget" '"capacity": ?256' "$out"
used_idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | paste -sd' ')
echo "device memory used (MiB) per GPU before npud: $used_before; npud serving, no client: $used_idle"
expect "npud holds no context while no client uses a GPU" "^${used_before}\$" "$used_idle"

section "daemon-side streams and events (npuctl): a context while a client uses the GPU"
out=$(ctl stream create --count 4 2>&1; ctl -o json stream list 2>&1); echo "$out"
expect "npuctl creates daemon-side streams" '"handle"' "$out"
used_client=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | paste -sd' ')
echo "device memory used (MiB) per GPU with a gRPC client's streams: $used_client"
expect "the client's context's device memory is measured" '^[0-9]' "$used_client"

section "an unmodified program, without npud"
out=$("$work/cuda_app" 8 0); echo "$out"
expect "cuda_app runs on the bare driver" '^ok 8' "$out"

section "the same program under npuctl run (linked, then through cuGetProcAddress_v2)"
out=$(ctl run --streams 9 -- "$work/cuda_app" 8 0); echo "$out"
expect "interposed cuda_app (linked)" '^ok 8' "$out"
out=$(CUDA_APP_LIBRARY=$lib ctl run --streams 9 -- "$work/cuda_app_pa" 8 0); echo "$out"
expect "interposed cuda_app (cuGetProcAddress)" '^ok 8' "$out"

section "callbacks, flags, memory under npuctl run"
out=$(ctl run -- "$work/cuda_callbacks" 2>&1); echo "$out"
expect "cuda_callbacks under the interposer" '^ok' "$out"
says_ok cuda_default_stream "the NULL stream's ordering on the bare driver (what fake-cuda models)" \
    "the NULL stream under the interposer"
says_ok cuda_edges "the driver's edge cases answer as fake-cuda expects them" \
    "the edge cases under the interposer"
says_ok cuda_basics "the everyday calls around streams answer as fake-cuda expects them" \
    "the everyday calls under the interposer"
says_ok cuda_value_ops "streams synchronised through memory, as fake-cuda expects" \
    "streams synchronised through memory under the interposer"

section "a quota of 16 refuses the 17th stream with CUDA_ERROR_OUT_OF_MEMORY"
ctl quota set root --max-streams 16 >/dev/null
out=$(ctl run --streams 4 -- "$work/cuda_app" 20 0); echo "$out"
expect "quota refusal is the driver's code 2" '^fail 2 after 1[0-9]' "$out"
ctl quota set root --max-streams 256 >/dev/null

section "a tenant's priority limit: no stream more urgent than it, as the driver reads them back"
out=$("$work/cuda_priorities" </dev/null 2>&1); echo "bare: $out"
expect "priorities on the bare driver (0, -5, -1, -100 clamped to -5)" '^ok priorities 0 -5 -1 -5' "$out"
ctl quota set root --highest-priority -2 >/dev/null
out=$(ctl run --streams 5 -- "$work/cuda_priorities" </dev/null 2>&1); echo "limited to -2: $out"
expect "priorities under a tenant limited to -2" '^ok priorities 0 -2 -1 -2' "$out"
ctl quota set root --highest-priority -5 >/dev/null

section "a holder shows in status; SIGKILL gives its streams back"
sleep 30 | ctl run --streams 40 -- "$work/cuda_app" 40 -1 >"$work/holder.out" &
holder=$!
for _ in $(seq 100); do grep -q '^ok' "$work/holder.out" && break; sleep 0.1; done
during=$(ctl -o json status); echo "$during" | head -c 1500; echo
pid=$(pgrep -f "$work/cuda_app 40 -1" | head -1)
kill -9 "$pid" 2>/dev/null
sleep 1
after=$(ctl -o json status); echo "$after" | head -c 600; echo
expect "status shows the holder's 40" '"streams": ?40' "$during"
kill "$holder" 2>/dev/null

section "device identity: npud's UUID and PCI bus id are the driver's, as nvidia-smi prints them"
# nvidia-smi numbers GPUs in PCI order and CUDA fastest first: match each by UUID.
smi=$(nvidia-smi --query-gpu=uuid,pci.bus_id --format=csv,noheader); echo "$smi"
list=$(ctl -o json device list)
out=$(python3 - "$list" "$smi" <<'PY'
import json, sys
npud = {d.get("uuid"): d for d in json.loads(sys.argv[1])}
for line in sys.argv[2].strip().splitlines():
    uuid, bus = (f.strip() for f in line.split(","))
    d = npud.get(uuid)
    if d is None:
        print(f"missing {uuid}"); continue
    # nvidia-smi writes an 8-digit PCI domain, cuDeviceGetPCIBusId a 4-digit one.
    same = bus.lower().split(":", 1)[1] == (d.get("pci_bus_id") or "").lower().split(":", 1)[-1]
    print(("same" if same else "differs"), uuid, bus, "npud device", d["id"], d.get("pci_bus_id"))
PY
); echo "$out"
expect "every GPU's UUID and PCI bus id in device list" '^same' "$out"
reject "no GPU missing from device list or differing" '^(missing|differs)' "$out"
uuid=$(head -1 <<<"$smi" | cut -d, -f1)
out=$(ctl status); echo "$out" | head -8
expect "status names the GPU by UUID" "$uuid" "$out"

section "programs renumbered by CUDA_VISIBLE_DEVICES are booked on the GPU their UUID names"
held() { # DEVICE:GRANTED:CREATED per native holder; "none" when npud books none
    ctl -o json status | python3 -c 'import json, sys
hs = json.load(sys.stdin)["native_holders"]
print(";".join("%d:%d:%d" % (h["device"], h["streams"], h["created"]) for h in hs) or "none")'
}
for visible in "$uuid" "${uuid:0:12}" 0; do
    for teardown in reset release; do
        rm -f "$work/in"; mkfifo "$work/in"
        CUDA_VISIBLE_DEVICES=$visible ctl run --streams 11 -- "$work/cuda_app" 10 -1 $teardown <"$work/in" >"$work/id.out" 2>&1 &
        app=$!
        exec 3>"$work/in"
        for _ in $(seq 100); do grep -qE '^(ok|fail)' "$work/id.out" && break; sleep 0.1; done
        # The interposer reports what it created once the start-up's batch is quiet.
        for _ in $(seq 50); do [[ $(held) == *":10" ]] && break; sleep 0.1; done
        during=$(held)
        echo go >&3
        for _ in $(seq 100); do grep -q '^gone' "$work/id.out" && break; sleep 0.1; done
        for _ in $(seq 50); do [[ $(held) == none || $(held) == *":0" ]] && break; sleep 0.1; done
        after=$(held)
        exec 3>&-
        wait $app
        echo "CUDA_VISIBLE_DEVICES=$visible $teardown: $(tr '\n' ' ' <"$work/id.out")| holders during [$during] after [$after]"
        expect "CUDA_VISIBLE_DEVICES=$visible books device 0's UUID" '^0:11:10$' "$during"
        expect "$teardown gives the streams back while the program runs" '^gone 0' "$(cat "$work/id.out")"
        expect "$teardown: npud counts them back" '^none$|:0$' "$after"
    done
done

section "green contexts: streams made in one are booked while the driver holds them"
# Destroyed before their green context, the streams go at once. cuGreenCtxDestroy leaves
# them behind, and then cuStreamDestroy cannot destroy them either (709): the driver holds
# them, and npud books them, until the process exits. Linked and through
# cuGetProcAddress_v2; with "current" every other stream is made by cuStreamCreate with
# the green context current as a CUcontext.
out=$("$work/cuda_green" 8 </dev/null 2>&1); echo "bare, destroyed first: $(tr '\n' ' ' <<<"$out")"
expect "a green context's streams on the bare driver" '^ok 8 [0-9]+' "$out"
expect "destroyed before their green context" '^done' "$out"
out=$(printf 'go\ndestroy\n' | "$work/cuda_green" 8 2>&1); echo "bare, left behind: $(tr '\n' ' ' <<<"$out")"
expect "cuGreenCtxDestroy on the bare driver" '^detached 0' "$out"
expect "streams left by their green context cannot be destroyed (709)" '^destroyed 0 709' "$out"
says_ok cuda_green_edges "green contexts' edge cases answer as fake-cuda expects them" \
    "green contexts' edge cases under the interposer"
for prog in cuda_green cuda_green_pa; do
    for how in green current; do
        rm -f "$work/in"; mkfifo "$work/in"
        CUDA_APP_LIBRARY=$lib ctl run --streams 9 -- "$work/$prog" 8 $how <"$work/in" >"$work/green.out" 2>&1 &
        app=$!
        exec 3>"$work/in"
        for _ in $(seq 100); do grep -qE '^(ok|fail)' "$work/green.out" && break; sleep 0.1; done
        for _ in $(seq 50); do [[ $(held) == *":8" ]] && break; sleep 0.1; done
        during=$(held)
        echo go >&3
        echo destroy >&3
        for _ in $(seq 100); do grep -q '^destroyed' "$work/green.out" && break; sleep 0.1; done
        sleep 1
        left=$(held)
        exec 3>&-
        wait $app
        for _ in $(seq 50); do [[ $(held) == none || $(held) == *":0" ]] && break; sleep 0.1; done
        after=$(held)
        echo "$prog $how: $(tr '\n' ' ' <"$work/green.out")| holders during [$during] left [$left] after [$after]"
        expect "$prog $how: booked while made" '^0:9:8$' "$during"
        expect "$prog $how: the driver refuses to destroy what its green context left" '^destroyed 0 709' "$(cat "$work/green.out")"
        expect "$prog $how: still booked while the process lives" ':8$' "$left"
        expect "$prog $how: ran to the end" '^done' "$(cat "$work/green.out")"
        expect "$prog $how: counted back when the process exits" '^none$|:0$' "$after"
    done
done

section "what a stream costs: bare driver, interposed with a held budget, interposed asking per batch"
for mode in bare held ask bare held ask; do
    case $mode in
        bare) out=$("$work/cuda_create_cost" 64 1000 2>&1) ;;
        held) out=$(ctl run --streams 65 -- "$work/cuda_create_cost" 64 1000 2>&1) ;;
        ask) out=$(ctl run --streams 1 -- "$work/cuda_create_cost" 64 1000 2>&1) ;;
    esac
    echo "$mode: $out"
    expect "cost run ($mode)" '^create_ns' "$out"
    # The interposer writes to stderr only when something went wrong (a lost connection).
    reject "cost run ($mode): nothing from the interposer" 'npud-preload' "$out"
done

if python3 -c 'import torch, grpc' 2>/dev/null; then
    section "PyTorch, unmodified, under npuctl run"
    ctl run --streams 100 -- python3 "$repo/scripts/gpu/torch_streams.py" 4 >"$work/torch.out" 2>&1 &
    for _ in $(seq 300); do grep -qE '^(ok|fail)' "$work/torch.out" && break; sleep 0.1; done
    during=$(ctl -o json status)
    wait $!
    cat "$work/torch.out"; echo "$during" | head -c 1200; echo
    expect "torch runs interposed" '^ok' "$(cat "$work/torch.out")"
    section "two PyTorch processes under a 200-stream quota: the second queues, then runs"
    ctl quota set root --max-streams 200 >/dev/null
    ctl run --streams 130 -- python3 "$repo/scripts/gpu/torch_streams.py" 5 >"$work/first.out" 2>&1 &
    first=$!
    for _ in $(seq 300); do grep -qE '^(ok|fail)' "$work/first.out" && break; sleep 0.1; done
    start=$(date +%s%N)
    out=$(ctl run --streams 130 --wait 60s -- python3 "$repo/scripts/gpu/torch_streams.py" 0 2>&1 | tail -3)
    waited=$((($(date +%s%N) - start) / 1000000))
    wait $first
    echo "first: $(cat "$work/first.out")"; echo "second (after ${waited} ms): $out"
    expect "the second torch waited for the first's streams, then ran" '^ok' "$out"
    ctl quota set root --max-streams 16 >/dev/null
    out=$(ctl run --streams 8 -- python3 "$repo/scripts/gpu/torch_streams.py" 0 2>&1 | tail -3); echo "$out"
    expect "torch under a 16-stream quota fails cleanly" '^fail' "$out"
    ctl quota set root --max-streams 256 >/dev/null
fi

if python3 -c 'import grpc, cuda.core' 2>/dev/null; then
    section "the same program through cuda.core and through npud.core"
    out=$(NPUD_SOCKET=$sock PYTHONPATH=$repo/client/python/src:${PYTHONPATH:-} python3 "$repo/scripts/gpu/core_beside.py" 2>&1)
    echo "$out"
    expect "npud.core reads as cuda.core does" '^ok' "$out"
fi

kill "$npud_pid"; wait "$npud_pid"
echo "npud exit: $?"; tail -5 "$work/npud.log"
reject "npud logged no warning or error" ' (WARN|ERROR) ' "$(cat "$work/npud.log")"

if [[ -d $bin/deps ]]; then
    for suite in semantics callbacks; do
        exe=$(ls -t "$bin"/deps/"$suite"-* 2>/dev/null | grep -v '\.d$' | head -1)
        [[ -n $exe ]] || continue
        section "the $suite suite on the GPU"
        # One test at a time: contexts of different processes are time-sliced on a GPU, so
        # concurrent daemons stretch each other's device-timed intervals.
        out=$(NPUD_TEST_BACKEND=cuda NPUD_TEST_CUDA_LIBRARY=$lib timeout 240 "$exe" --test-threads 1 2>&1)
        grep -E '^test |test result|panicked' <<<"$out" | head -60
        expect "$suite suite" 'test result: ok' "$out"
    done
fi

if python3 -c 'import grpc, cuda.core' 2>/dev/null; then
    section "npud.core beside cuda.core (the Python tests on the GPU)"
    out=$(cd "$repo" && NPUD_BIN=$bin/npud NPUD_TEST_CUDA_LIBRARY=$lib PYTHONPATH=$repo/client/python/src:${PYTHONPATH:-} \
        python3 -m pytest -q -p no:cacheprovider client/python/tests/test_cuda_core.py 2>&1 | tail -25)
    echo "$out"
    expect "npud.core tests on the GPU" ' passed' "$out"
fi

section summary
printf '%s\n' "${verdicts[@]}"
! printf '%s\n' "${verdicts[@]}" | grep -q '^FAIL'
