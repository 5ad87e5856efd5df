#!/usr/bin/env python3
"""Summarises an A/B of kbmla binaries (bench/ab_multi.sh's JSON files): per case, each
binary's median over the rounds of its eager median time, the range, the change against the
first binary and % of copy; with --graph the same of the graph-replay medians (runs with
AB_FLAGS=--graph: each case also timed as a replayed CUDA graph, without the host's launch).

Usage: bench/ab_table.py DIR [--base TAG] [--graph]   (DIR holds <tag>-<dtype>-r<N>.json[.gz]
files; the base is the first tag in sorted order unless --base names one)."""
import argparse
import gzip
import json
import os
import re
import statistics
import sys

NAME = re.compile(r"^(?P<tag>.+)-(?P<dtype>bf16|fp8_e4m3|fp8_e4m3_block)-r(?P<round>\d+)\.json(\.gz)?$")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def collect(directory, graph=False):
    """{(dtype, case): {tag: [(median_us, pct_of_copy), ...]}} and the case order seen (graph:
    the graph-replay figures; a file without them is an error, not a silent eager figure)."""
    keys = ("graph_median_us", "graph_pct_of_copy") if graph else ("median_us", "pct_of_copy")
    runs, order = {}, []
    for name in sorted(os.listdir(directory)):
        m = NAME.match(name)
        if not m:
            continue
        for r in load(os.path.join(directory, name))["results"]:
            if r.get("policy", "worklist") != "worklist":
                continue
            key = (m["dtype"], r["case"])
            if key not in runs:
                order.append(key)
            if keys[0] not in r:
                sys.exit(f"ab_table: {name}: {r['case']} has no {keys[0]} (run the A/B with AB_FLAGS=--graph)")
            runs.setdefault(key, {}).setdefault(m["tag"], []).append((r[keys[0]], r[keys[1]]))
    return runs, order


def table(runs, order, base=None):
    """Rows: (dtype, case, tag, median us, min, max, change vs base in %, median % of copy)."""
    rows = []
    for key in order:
        by_tag = runs[key]
        tags = sorted(by_tag)
        ref = base if base in by_tag else tags[0]
        ref_us = statistics.median(t for t, _ in by_tag[ref])
        for tag in [ref] + [t for t in tags if t != ref]:
            times = [t for t, _ in by_tag[tag]]
            us = statistics.median(times)
            rows.append((key[0], key[1], tag, us, min(times), max(times), 100.0 * (us / ref_us - 1.0),
                         statistics.median(p for _, p in by_tag[tag])))
    return rows


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--base", help="the tag the others are compared with (default: the first)")
    ap.add_argument("--graph", action="store_true", help="the graph-replay medians instead of the eager ones")
    a = ap.parse_args(argv)
    runs, order = collect(a.directory, a.graph)
    if not runs:
        sys.exit(f"ab_table: no <tag>-<dtype>-r<N>.json files in {a.directory}")
    for dtype, case, tag, us, lo, hi, change, pct in table(runs, order, a.base):
        print(f"{dtype:15s} {case:36s} {tag:24s} {us:8.1f} us ({lo:.1f}-{hi:.1f})  {change:+5.1f} %  {pct:5.1f} % of copy")


if __name__ == "__main__":
    main(sys.argv[1:])
