#!/usr/bin/env python3
"""Summarise several full npud-bench runs (their --json files): each target with what
every run measured and whether the median run met it (for a bound, the median meets it
exactly when most runs do). Prints a Markdown table for BENCHMARKS.md.

    scripts/bench-summary.py run1.json run2.json run3.json
"""
import json
import sys


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    if not runs:
        sys.exit("usage: bench-summary.py RUN.json...")
    print("| target | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | median (most runs) |")
    print("| --- |" + " --- |" * len(runs) + " --- |")
    for i, t in enumerate(runs[0]["targets"]):
        rows = [r["targets"][i] for r in runs if i < len(r["targets"])]
        met = sum(1 for r in rows if r["met"]) * 2 > len(rows)
        cells = " | ".join(r["measured"] for r in rows)
        print(f"| {t['target']} | {cells} | {'met' if met else '**missed**'} |")


if __name__ == "__main__":
    main(sys.argv[1:])
