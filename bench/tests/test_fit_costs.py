"""bench/fit_costs.py: the cost model's terms recovered from synthetic busy times, the row
class filter, and runs without planned work per CTA."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import fit_costs  # noqa: E402


def result(case, rows, work, coef, cluster=1, page=64, noise=()):
    """A bench result whose CTAs' busy times follow coef = (c0, block, item, split) exactly,
    plus per-CTA noise."""
    intervals = []
    for k, w in enumerate(work):
        busy = fit_costs.predict(coef, w) + (noise[k] if k < len(noise) else 0.0)
        intervals.append([0.1 * k, 0.1 * k + busy, k])
    return {"case": case, "policy": "worklist", "kv_dtype": "fp8_e4m3", "page_size": page,
            "path": {"cta_rows": rows, "cluster_size": cluster}, "cta_intervals": intervals,
            "cta_work": [list(w) for w in work]}


COEF = (-1.0, 1.06, 5.3, 1.4)
WORK = [(1, 33, 1), (2, 32, 0), (3, 26, 2), (2, 30, 1), (1, 64, 0), (4, 129, 2), (1, 140, 1)]


def test_recovers_the_terms_and_ignores_other_row_classes():
    run = {"sm_count": 132, "results": [
        result("skew", 16, WORK, COEF),
        # A 64-row tile case priced differently must not enter a narrow fit.
        result("tile", 64, WORK, (0.0, 9.0, 90.0, 9.0)),
        result("paged", 16, WORK, (0.0, 9.0, 90.0, 9.0), page=16),
    ]}
    data, skipped = fit_costs.samples([run], "narrow")
    assert {case for case, _, _ in data} == {"skew"} and not skipped
    c0, block, item, split = fit_costs.fit(data)
    assert (c0, block, item, split) == pytest.approx(COEF, abs=1e-6)
    text = fit_costs.report(data, (c0, block, item, split))
    assert "per_item 5000" in text and "per_split 1321" in text


def test_noise_moves_the_fit_little():
    noise = [0.3, -0.2, 0.1, -0.3, 0.2, -0.1, 0.0]
    run = {"sm_count": 132, "results": [result("skew", 16, WORK, COEF, noise=noise)]}
    data, _ = fit_costs.samples([run], "narrow")
    assert fit_costs.fit(data)[2] == pytest.approx(5.3, abs=0.5)


def test_runs_without_planned_work_are_skipped_with_a_reason():
    old = result("skew", 16, WORK, COEF)
    del old["cta_work"]
    data, skipped = fit_costs.samples([{"sm_count": 132, "results": [old]}], "narrow")
    assert data == [] and "give --plan-bin" in skipped[0]


def test_too_few_slot_shapes_is_an_error():
    run = {"sm_count": 132, "results": [result("uniform", 16, [(1, 64, 0)] * 5, COEF)]}
    data, _ = fit_costs.samples([run], "narrow")
    with pytest.raises(ValueError, match="do not determine every term"):
        fit_costs.fit(data)


def test_candidate_items_are_planned_and_priced(tmp_path):
    # A stand-in for `kbmla plan --json`: two slot shapes whose mix follows --cost-item.
    fake = tmp_path / "kbmla"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        "a = sys.argv\n"
        "item = int(a[a.index('--cost-item') + 1]) if '--cost-item' in a else 3000\n"
        "assert a[1] == 'plan' and '--json' in a and a[a.index('--cost-block') + 1] == '900'\n"
        "slots = [[2, 32, 0]] * 4 + [[1, 35, 1]] * 4 if item < 4000 else [[2, 30, 0]] * 4 + [[1, 36, 1]] * 5\n"
        "print(json.dumps({'slots': slots, 'cluster_size': 1}))\n")
    fake.chmod(0o755)
    text = fit_costs.predict_plans(COEF, str(fake), {"skew"}, "fp8_e4m3", 132, [3000, 5000], ["--cost-block", "900"])
    two_short = fit_costs.predict(COEF, (2, 32, 0))
    assert f"3000: {two_short:.1f} /" in text and "(8 slots)" in text and "(9 slots)" in text
