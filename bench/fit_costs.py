#!/usr/bin/env python3
"""Fit the planner's cost model (planner_core.hpp: ns per KV block, per work item, per split
item) to measured per-CTA busy times.

Usage: python3 bench/fit_costs.py RUN.json[.gz] [RUN ...] --rows {narrow,tile,cluster}
       [--cases A,B,...] [--page-size 64] [--plan-bin build/kbmla [--cost-block N --cost-item N --cost-split N]
       [--try-item N,N,...]]

RUN files are `kbmla bench --balance` results of one cache dtype (work-list policy). Each CTA's
busy time (cta_intervals: end - start) is paired with its slot's planned work (cta_work:
items, KV blocks, split items; recorded by bench since 83c39ea, v63). Older files have no
cta_work: with --plan-bin the slots come from `kbmla plan --json` of that binary, which must
plan with the run's cost model (the binary's own model by default; --cost-* flags replace
fields of it, in binaries from 83c39ea on: older ones started from a generic model), and a
case is skipped where its CTA count does not match the plan.

Rows select one row class of the model (narrow: at most 16 rows a CTA; tile: 17..64; cluster:
2-CTA clusters above 64 rows). The fit is least squares of
    busy_us = c0 + block * blocks + item * items + split * split_items
over every CTA of the selected cases (keep to cases of one cache row size with --cases: a
d_qk 512 case streams fewer bytes a block than its 576 twin). It prints the coefficients,
the model's terms in ns at the fitted block cost of 1000 (the planner's units are relative:
only ratios move a plan),
and per case and slot type (items, blocks, split items) the measured and fitted means, so
that a misfit shows where it sits. With --plan-bin and --try-item it also plans each case at
each candidate per_item and prices the plan's slots with the fit (slowest slot and mean): the
prediction to write down before an A/B. bench/NOTES.md v63 used it to price the narrow fp8
item (busy times do not show the merge a split adds after the decode: judge per_split by
end-to-end time).
"""
import argparse
import collections
import gzip
import json
import subprocess
import sys

ROW_CLASSES = {"narrow": (1, 16, 1), "tile": (17, 64, 1), "cluster": (1, 128, 2)}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def in_class(result, rows):
    lo, hi, cluster = ROW_CLASSES[rows]
    path = result.get("path") or {}
    return path.get("cluster_size") == cluster and lo <= path.get("cta_rows", 0) <= hi


def planned_slots(plan_bin, case, dtype, sms, cost_flags):
    cmd = [plan_bin, "plan", "--case", case, "--kv-dtype", dtype, "--sms", str(sms), "--json"] + cost_flags
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"fit_costs: {' '.join(cmd)} failed: {out.stderr.strip()}")
    plan = json.loads(out.stdout)
    return plan["slots"], plan["cluster_size"]


def samples(runs, rows, cases=None, page_size=64, plan_bin=None, cost_flags=()):
    """(case, (items, blocks, split items), busy us) per CTA of the selected results."""
    out, skipped = [], []
    for run in runs:
        for r in run["results"]:
            if r.get("policy", "worklist") != "worklist" or "cta_intervals" not in r:
                continue
            if cases is not None and r["case"] not in cases:
                continue
            if r.get("page_size", 64) != page_size or not in_class(r, rows):
                continue
            intervals = r["cta_intervals"]
            work = r.get("cta_work")
            if work is None:
                if plan_bin is None:
                    skipped.append(f"{r['case']}: no cta_work (a run from before v63: give --plan-bin)")
                    continue
                slots, cluster = planned_slots(plan_bin, r["case"], r["kv_dtype"], run["sm_count"], list(cost_flags))
                if len(intervals) != len(slots) * cluster:
                    skipped.append(f"{r['case']}: {len(intervals)} CTAs with items, the plan has {len(slots)} slots")
                    continue
                work = [slots[k // cluster] for k in range(len(intervals))]
            if len(work) != len(intervals):
                skipped.append(f"{r['case']}: {len(work)} cta_work entries for {len(intervals)} intervals")
                continue
            for (start, end, _sm), w in zip(intervals, work):
                out.append((r["case"], tuple(int(x) for x in w), end - start))
    return out, skipped


def solve(a, b):
    """Gaussian elimination with partial pivoting on a small dense system."""
    n = len(b)
    m = [list(a[i]) + [b[i]] for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda i: abs(m[i][col]))
        if abs(m[pivot][col]) < 1e-12:
            raise ValueError("the selected CTAs do not determine every term (too few distinct slot shapes)")
        m[col], m[pivot] = m[pivot], m[col]
        for i in range(n):
            if i != col:
                f = m[i][col] / m[col][col]
                m[i] = [x - f * y for x, y in zip(m[i], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(data, intercept=True):
    """Least squares through the normal equations; returns (c0, block, item, split) in us."""
    rows = [([1.0] if intercept else []) + [float(w[1]), float(w[0]), float(w[2])] for _, w, _ in data]
    y = [busy for _, _, busy in data]
    k = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    aty = [sum(r[i] * t for r, t in zip(rows, y)) for i in range(k)]
    coef = solve(ata, aty)
    return tuple(coef) if intercept else (0.0,) + tuple(coef)


def predict(coef, w):
    c0, block, item, split = coef
    return c0 + block * w[1] + item * w[0] + split * w[2]


def report(data, coef):
    c0, block, item, split = coef
    lines = [f"fit over {len(data)} CTAs: busy us = {c0:.2f} + {block:.3f} a block + {item:.2f} an item + "
             f"{split:.2f} a split item",
             f"as the planner's ns at a block of 1000: per_item {1000 * item / block:.0f}, "
             f"per_split {1000 * split / block:.0f}"]
    by_case = collections.defaultdict(lambda: collections.defaultdict(list))
    for case, w, busy in data:
        by_case[case][w].append(busy)
    for case in sorted(by_case):
        types = by_case[case]
        err = [b - predict(coef, w) for w, v in types.items() for b in v]
        rms = (sum(e * e for e in err) / len(err)) ** 0.5
        shapes = sorted(types.items(), key=lambda kv: -len(kv[1]))[:5]
        cells = " ".join(f"{w}: {sum(v) / len(v):.1f}/{predict(coef, w):.1f} (n {len(v)})" for w, v in shapes)
        lines.append(f"  {case[:36]:36s} rms {rms:5.2f}  (items, blocks, splits): measured/fitted us {cells}")
    return "\n".join(lines)


def predict_plans(coef, plan_bin, cases, dtype, sms, candidates, base_flags):
    """Per case and candidate --cost-item, the fitted busy time of the plan's slowest slot and
    the mean over the slots with work: what a new per_item would do before a GPU run."""
    lines = ["predicted busy us of each plan's slowest slot / mean (fitted terms), by --cost-item:"]
    for case in sorted(cases):
        cells = []
        for item in candidates:
            slots, _ = planned_slots(plan_bin, case, dtype, sms, list(base_flags) + ["--cost-item", str(item)])
            busy = [predict(coef, w) for w in slots]
            cells.append(f"{item}: {max(busy):.1f} / {sum(busy) / len(busy):.1f} ({len(slots)} slots)")
        lines.append(f"  {case[:36]:36s} " + " | ".join(cells))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rows", choices=sorted(ROW_CLASSES), required=True)
    ap.add_argument("--cases", help="comma-separated case names (default: every case of the row class)")
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--no-intercept", action="store_true")
    ap.add_argument("--plan-bin", help="kbmla binary whose `plan --json` gives the slots of runs without cta_work")
    for flag in ("--cost-block", "--cost-item", "--cost-split"):
        ap.add_argument(flag, type=int, help="passed to `kbmla plan` with --plan-bin")
    ap.add_argument("--try-item", help="comma-separated per_item values (ns): with --plan-bin, each case's plan "
                    "at each value, priced by the fit")
    a = ap.parse_args(argv)
    runs = [load(p) for p in a.files]
    dtypes = {r.get("kv_dtype") for run in runs for r in run["results"]}
    if len(dtypes) != 1:
        sys.exit(f"fit_costs: the files mix cache dtypes {sorted(map(str, dtypes))}; fit one dtype at a time")
    cost_flags = []
    for name in ("cost_block", "cost_item", "cost_split"):
        if getattr(a, name) is not None:
            cost_flags += ["--" + name.replace("_", "-"), str(getattr(a, name))]
    cases = set(a.cases.split(",")) if a.cases else None
    data, skipped = samples(runs, a.rows, cases, a.page_size, a.plan_bin, cost_flags)
    for s in skipped:
        print(f"skipped {s}", file=sys.stderr)
    if not data:
        sys.exit(f"fit_costs: no CTA of row class {a.rows!r} at page size {a.page_size} in the files")
    coef = fit(data, intercept=not a.no_intercept)
    print(report(data, coef))
    if a.try_item:
        if a.plan_bin is None:
            sys.exit("fit_costs: --try-item needs --plan-bin (the binary whose planner to ask)")
        # The run's other cost flags stay; each candidate replaces --cost-item.
        pairs = list(zip(cost_flags[0::2], cost_flags[1::2]))
        base = [x for flag, value in pairs if flag != "--cost-item" for x in (flag, value)]
        print(predict_plans(coef, a.plan_bin, {case for case, _, _ in data}, dtypes.pop(),
                            runs[0].get("sm_count", 132), [int(x) for x in a.try_item.split(",")], base))


if __name__ == "__main__":
    main()
