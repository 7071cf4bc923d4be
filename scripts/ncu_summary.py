#!/usr/bin/env python3
"""Summarise Nsight Compute CSV output (ncu --csv --page details) as one row
per profiled kernel launch: duration, DRAM throughput as a share of peak,
registers a thread, achieved and theoretical occupancy, waves per SM, grid
and block. Reads the files given (or stdin) and prints a Markdown table.

    ncu --clock-control none --section SpeedOfLight --section LaunchStats \
        --section Occupancy --csv --page details PROGRAM ARGS > out.csv
    scripts/ncu_summary.py out.csv
"""
import csv
import sys

COLUMNS = [
    ("Duration", "µs", lambda v: f"{float(v) / 1000:.1f}"),
    ("DRAM Throughput", "DRAM %", None),
    ("Registers Per Thread", "regs", None),
    ("Achieved Occupancy", "occ. %", None),
    ("Theoretical Occupancy", "max occ. %", None),
    ("Waves Per SM", "waves", None),
]


def launches(lines):
    """Yield (id, kernel, block, grid, {metric: (value, unit)}) per launch, in order."""
    rows = [r for r in csv.reader(lines) if len(r) > 14 and r[0] != "ID"]
    seen = {}
    for r in rows:
        key = (r[0], r[4], r[7], r[8])
        seen.setdefault(key, {})[r[12]] = (r[14].replace(",", ""), r[13])
    for (i, name, block, grid), metrics in seen.items():
        yield i, name, block, grid, metrics


def main():
    files = sys.argv[1:] or ["-"]
    print("| # | kernel | grid | block | " + " | ".join(h for _, h, _ in COLUMNS) + " |")
    print("|---|---|---|---|" + "---|" * len(COLUMNS))
    for f in files:
        with (sys.stdin if f == "-" else open(f, encoding="utf-8", errors="replace")) as fh:
            for i, name, block, grid, m in launches(fh):
                cells = []
                for metric, _, fmt in COLUMNS:
                    v = m.get(metric, ("–", ""))[0]
                    if fmt and v != "–":
                        try:
                            v = fmt(v)
                        except ValueError:
                            pass
                    cells.append(v)
                print(f"| {i} | {name} | {grid} | {block} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
