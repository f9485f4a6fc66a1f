#!/usr/bin/env python3
"""BENCHMARKS.md's generated sections, from several full npud-bench runs (their --json files).

    scripts/bench-report.py run1.json run2.json run3.json > /tmp/report.md

Prints, in Markdown:
- "Results": every table of one run, the middle file given (run 2 of three), because a
  table mixes figures of one run only: its ratios were taken in that run;
- "Targets": each target with what every run measured, and whether the median run met it
  (for a bound, the median meets it exactly when most runs do).

Only the standard library: it runs wherever the bench's JSON can be copied.
"""
import json
import sys


def fmt_int(x):
    return f"{x:,.0f}"


def results(run):
    out = []
    emit = out.append
    emit("| call (one client, sequential) | p50 µs | p99 µs | × npud empty p50 | +µs above it |")
    emit("| --- | ---: | ---: | ---: | ---: |")
    for c in run["calls"]:
        emit(
            f"| {c['call']} | {c['p50_us']:.1f} | {c['p99_us']:.1f} | {c['ratio_to_empty']:.2f} "
            f"| {c['above_empty_us']:+.1f} |"
        )
    emit("")
    emit("| server CPU per call, all threads | µs | × npud empty |")
    emit("| --- | ---: | ---: |")
    for c in run["server_cpu"]:
        emit(f"| {c['call']} | {c['cpu_us']:.1f} | {c['ratio_to_empty']:.2f} |")
    emit("")
    emit(
        "| concurrent clients | empty calls/s | record/s | record ÷ empty "
        "| create+destroy pairs/s | ÷ empty calls/s |"
    )
    emit("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for t in run["throughput"]:
        emit(
            f"| {t['clients']} | {fmt_int(t['empty_ops_s'])} | {fmt_int(t['record_ops_s'])} "
            f"| {t['record_ratio']:.2f} | {fmt_int(t['create_destroy_s'])} | {t['create_destroy_ratio']:.2f} |"
        )
    emit("")
    first = run["contention"][0]
    emit(
        f"| contention, {first['jobs']} jobs x {first['streams_per_job']} streams | jobs ok | failed "
        "| streams leaked | grant p50 | grant p99 | makespan |"
    )
    emit("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in run["contention"]:
        emit(
            f"| {c['policy']} | {c['succeeded']} | {c['failed']} | {c['leaked_streams']} "
            f"| {c['grant_ms_p50']:.0f} ms | {c['grant_ms_p99']:.0f} ms | {c['makespan_ms'] / 1e3:.2f} s |"
        )
    emit("")
    i = run["interposer"]
    native = i["native_p50_ms"]
    emit("| interposer | p50 ms | × native start-up |")
    emit("| --- | ---: | ---: |")
    streams = i["startup_streams"]
    for name, ms in [
        (f"process start-up, {streams} streams, native", native),
        ("the same under the interposer", i["interposed_p50_ms"]),
        ("`true`, no vendor call", i["true_p50_ms"]),
        ("`true` with the interposer loaded", i["true_preloaded_p50_ms"]),
    ]:
        emit(f"| {name} | {ms:.3f} | {ms / native:.2f} |")
    emit("")
    if "startup_ratio_by_half" in i:
        first, second = i["startup_ratio_by_half"]
        emit(
            "Start-ups run in rounds of native, interposed, interposed, native: the interposed start-up "
            f"reads {first:.3}x native in the first half of the rounds, {second:.3}x in the second, "
            f"{i['startup_ratio']:.3}x over both."
        )
        emit("")
    d = i.get("decomposed")
    if d:
        base = d["native_ms"]
        emit(
            f"The same start-up taken apart in rounds of its own, {d['runs_each']} runs of each (information): native "
            f"{base:.3f} ms; any preloaded library (an empty one) {d['empty_preload_ms'] / base:.3f}x; the "
            f"interposer against a stand-in that grants at once {d['standin_ms'] / base:.3f}x; with npud "
            f"{d['npud_ms'] / base:.3f}x."
        )
        emit("")
    emit(
        f"Budget calls per interposed process, start-up and exit: {i['calls_per_process']:.1f} "
        f"({i['acquires_per_process']:.1f} acquire); the library's own load cost: "
        f"{i['load_ms']:.3f} ms."
    )
    emit("")
    emit("| crowd on one device | processes | failed | makespan | ideal (waves x hold) |")
    emit("| --- | ---: | ---: | ---: | ---: |")
    for c in i["crowd"]:
        emit(
            f"| {c['run']} | {c['processes']} | {c['failed']} | {c['makespan_s']:.2f} s "
            f"| {c['ideal_s']:.2f} s |"
        )
    emit("")
    rounds = i.get("crowd_300x10_rounds")
    if rounds:
        emit(
            "300 x 10 makespans, round by round: native with failed ones restarted "
            + " / ".join(f"{x:.2f}" for x in rounds["restarted_makespans_s"])
            + " s; under the interposer "
            + " / ".join(f"{x:.2f}" for x in rounds["interposed_makespans_s"])
            + " s."
        )
        emit("")
    node = i.get("node", {})
    if "crowds" in node:
        c, m = node["crowds"], node["memory"]
        p50 = lambda xs: sorted(xs)[len(xs) // 2]
        emit("| the node (8 NPUs) | native | under the interposer | x native |")
        emit("| --- | ---: | ---: | ---: |")
        emit(
            f"| TP-8 start-up, 8 x 70 streams, p50 | {node['tp8_native_p50_ms']:.2f} ms "
            f"| {node['tp8_interposed_p50_ms']:.2f} ms | {node['tp8_ratio']:.2f} |"
        )
        n, s = p50(c["restarted_makespans_s"]), p50(c["interposed_makespans_s"])
        emit(f"| 8 x 40 x 61 at once, failed ones restarted, makespan p50 | {n:.2f} s | {s:.2f} s | {s / n:.2f} |")
        emit("")
        cpu = p50(c["npud_cpu_ms_per_process_beyond_idle"])
        emit(
            f"Plain native, {c['plain_native_failed']} of 320 processes failed; under the interposer "
            f"{c['interposed_failed']}. npud CPU per admitted process {cpu:.3f} ms beyond idle. "
            + (
                f"npud resident with {m['booked']} streams booked by {m['holders']} holders: "
                f"{m['rss_full_kib'] / 1024:.1f} MiB ({m['rss_idle_kib'] / 1024:.1f} MiB idle)."
                if "booked" in m
                else f"npud's memory was not measured: {m.get('error')}."
            )
        )
        emit("")
    emit("Scale and reclaim:")
    for s in run["sessions"]:
        emit(
            f"- {fmt_int(s['sessions'])} sessions: open p50 {s['open_us_p50']:.0f} µs, "
            f"{s['bytes_per_session']:.0f} bytes resident per session."
        )
    st = run["streams"]
    emit(f"- {st['live']} streams live (the device's whole budget): {st['bytes_per_stream']:.0f} bytes resident per stream.")
    levels = " / ".join(fmt_int(c["live"]) for c in st["create_cost"])
    costs = " / ".join(f"{c['p50_us']:.0f}" for c in st["create_cost"])
    emit(f"- create+destroy p50 with {levels} streams live (pool off): {costs} µs.")
    emit(f"- Reclaim: ledger back to baseline {run['reclaim_ms']:.0f} ms after its holders were SIGKILLed (1 s lease).")
    return out


def targets(runs):
    out = ["| target | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | median (most runs) |"]
    out.append("| --- |" + " --- |" * len(runs) + " --- |")
    for i, t in enumerate(runs[0]["targets"]):
        rows = [r["targets"][i] for r in runs if i < len(r["targets"])]
        met = sum(1 for r in rows if r["met"]) * 2 > len(rows)
        cells = " | ".join(r["measured"] for r in rows)
        out.append(f"| {t['target']} | {cells} | {'met' if met else '**missed**'} |")
    return out


def main(paths):
    if not paths:
        sys.exit("usage: bench-report.py RUN.json...  (whole runs: --crowds alone has no targets)")
    runs = []
    for p in paths:
        try:
            with open(p) as f:
                run = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"{p}: cannot read an npud-bench JSON file: {e}")
        if not isinstance(run, dict) or "targets" not in run:
            sys.exit(f"{p}: not a whole npud-bench run (--crowds alone has no targets)")
        runs.append(run)
    middle = len(runs) // 2
    kind = "quick runs" if any(r.get("quick") for r in runs) else "full runs"
    print(f"## Results (run {middle + 1} of {len(runs)})")
    print()
    print("\n".join(results(runs[middle])))
    print()
    print(f"## Targets (issues 20 and 33), {len(runs)} {kind}")
    print()
    print("\n".join(targets(runs)))


if __name__ == "__main__":
    main(sys.argv[1:])
