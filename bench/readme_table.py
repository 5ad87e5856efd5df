#!/usr/bin/env python3
"""The README's standing table from one or more runs of the three suites.

Usage: python3 bench/readme_table.py BF16.json[.gz] FP8.json[.gz] FP8BLOCK.json[.gz] [more runs' three files ...]
       [--cases bench/cases.json]

The files are those bench/acceptance.py reads, three per run in the same order. Every cell
is the median over the runs of that figure (eager median µs, % of the run's own copy
ceiling, the graph replay's % in parentheses, TFLOP/s; the fp8 time against bf16 is the
median of each run's own ratio, as acceptance.py pairs them). A case missing from a suite
shows a dash. Cases that name their own kv_dtype (the fp8_* / fp8block_* copies of other
cases, so that `--case all` without --kv-dtype covers the fp8 formats) are left out: every
suite runs them in its own dtype, so they repeat a row.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from acceptance import by_case, graph_pct, load, median, parse_runs  # noqa: E402

HEADER = ("| case | bf16 µs | bf16 % of copy (graph) | bf16 TFLOP/s | best public kernel % | "
          "fp8 per-tensor µs | % of copy | × bf16 time | fp8 per-block µs | % of copy |")
ALIGN = "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"


def med(values, fmt):
    v = [x for x in values if x is not None]
    return fmt % median(v) if len(v) == len(values) and v else "—"


def rows(trios, cases):
    suites = [[by_case(run) for run in trio] for trio in trios]
    out = []
    for case in cases:
        if "kv_dtype" in case:
            continue
        name = case["name"]
        bf16 = [s[0].get(name) for s in suites]
        fp8 = [s[1].get(name) for s in suites]
        block = [s[2].get(name) for s in suites]
        if all(r is None for r in bf16 + fp8 + block):
            continue
        get = lambda runs, key: [r and r.get(key) for r in runs]  # noqa: E731
        ratio = [f and b and f["median_us"] / b["median_us"] for f, b in zip(fp8, bf16)]
        graph = med([r and graph_pct(r) for r in bf16], "%.1f")
        ref = case.get("reference_kernel_pct_of_copy")
        out.append("| " + " | ".join([
            name,
            med(get(bf16, "median_us"), "%.1f"),
            med(get(bf16, "pct_of_copy"), "%.1f") + ("" if graph == "—" else f" ({graph})"),
            med(get(bf16, "tflops"), "%.0f"),
            "—" if ref is None else f"{ref:g}",
            med(get(fp8, "median_us"), "%.1f"),
            med(get(fp8, "pct_of_copy"), "%.1f"),
            med(ratio, "%.2f"),
            med(get(block, "median_us"), "%.1f"),
            med(get(block, "pct_of_copy"), "%.1f"),
        ]) + " |")
    return out


def main(argv=None):
    a, runs = parse_runs(argv, __doc__.split("\n")[0], "readme_table")
    trios = [runs[k:k + 3] for k in range(0, len(runs), 3)]
    print(HEADER)
    print(ALIGN)
    print("\n".join(rows(trios, load(a.cases)["cases"])))


if __name__ == "__main__":
    main()
