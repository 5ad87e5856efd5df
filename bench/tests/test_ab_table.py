"""bench/ab_table.py on synthetic A/B files: medians, ranges, the change against the base."""
import gzip
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import ab_table  # noqa: E402


def write(directory, name, results, compress=False):
    data = json.dumps({"results": results})
    path = os.path.join(directory, name)
    if compress:
        with gzip.open(path + ".gz", "wt") as f:
            f.write(data)
    else:
        with open(path, "w") as f:
            f.write(data)


def result(case, us, pct, policy="worklist"):
    return {"case": case, "median_us": us, "pct_of_copy": pct, "policy": policy}


def test_medians_ranges_and_changes(tmp_path):
    d = str(tmp_path)
    for r, (a, b) in enumerate([(100.0, 96.0), (102.0, 97.0), (101.0, 99.0)], start=1):
        write(d, f"build-kbmla-fp8_e4m3_block-r{r}.json", [result("x", a, 60.0 + r), result("y", 2 * a, 50.0, "static")])
        write(d, f"new-kbmla-fp8_e4m3_block-r{r}.json", [result("x", b, 70.0 + r)], compress=(r == 2))
    write(d, "unrelated.json", [result("x", 1.0, 1.0)])
    runs, order = ab_table.collect(d)
    assert order == [("fp8_e4m3_block", "x")]  # the static row and the unrelated file are left out
    rows = ab_table.table(runs, order)
    assert [row[2] for row in rows] == ["build-kbmla", "new-kbmla"]
    base, new = rows
    assert base[3:7] == (101.0, 100.0, 102.0, 0.0) and base[7] == 62.0
    assert new[3:6] == (97.0, 96.0, 99.0) and new[6] == pytest.approx(100.0 * (97.0 / 101.0 - 1.0))
    # --base picks the reference.
    rows = ab_table.table(runs, order, base="new-kbmla")
    assert rows[0][2] == "new-kbmla" and rows[1][6] == pytest.approx(100.0 * (101.0 / 97.0 - 1.0))


def test_an_empty_directory_is_an_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        ab_table.main([str(tmp_path)])
    assert "no <tag>-<dtype>-r<N>.json files" in str(e.value)


def test_graph_figures_on_request_and_an_error_where_missing(tmp_path):
    d = str(tmp_path)
    for r, (a, b) in enumerate([(100.0, 96.0), (102.0, 94.0)], start=1):
        write(d, f"a-kbmla-fp8_e4m3-r{r}.json", [dict(result("x", a, 60.0), graph_median_us=a - 3, graph_pct_of_copy=62.0)])
        write(d, f"b-kbmla-fp8_e4m3-r{r}.json", [dict(result("x", b, 65.0), graph_median_us=b + 1, graph_pct_of_copy=61.0)])
    rows = ab_table.table(*ab_table.collect(d, graph=True))
    assert [row[3] for row in rows] == [98.0, 96.0] and rows[1][7] == 61.0
    rows = ab_table.table(*ab_table.collect(d))  # the eager figures by default
    assert [row[3] for row in rows] == [101.0, 95.0]
    write(d, "c-kbmla-fp8_e4m3-r1.json", [result("x", 90.0, 70.0)])
    with pytest.raises(SystemExit) as e:
        ab_table.collect(d, graph=True)
    assert "has no graph_median_us" in str(e.value)
