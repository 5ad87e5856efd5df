"""bench/acceptance.py on the committed v46 suites: the figures it reads and the verdicts."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, BENCH)
import acceptance  # noqa: E402

RESULTS = [os.path.join(BENCH, "results", f"2026-12-01-h200-v46-{d}.json.gz") for d in ("bf16", "fp8_e4m3", "fp8_e4m3_block")]


@pytest.fixture(scope="module")
def report():
    runs = [acceptance.load(p) for p in RESULTS]
    return acceptance.evaluate(*runs, acceptance.public_cases(os.path.join(BENCH, "cases.json")))


def line(report, issue, item):
    found = [entry for entry in report.lines if entry[0] == issue and entry[1] == item]
    assert len(found) == 1, item
    return found[0]


def test_reads_the_runs_figures_and_judges_them(report):
    b1 = line(report, 4, "uniform_B1_Sq1_H16_L131072 % of copy")
    assert b1[2] == pytest.approx(63.974, abs=1e-3) and b1[3] == pytest.approx(67.391, abs=1e-3)
    assert b1[4] == 65.0 and not b1[6]
    assert line(report, 4, "uniform_B64_Sq1_H16_L32768 % of copy")[6]
    tflops = line(report, 4, "uniform_B64_Sq1_H128_L8192 TFLOP/s")
    assert tflops[2] == pytest.approx(528.72, abs=0.01) and not tflops[6]
    # Reference - 1: every public case of the cases file, in bf16.
    assert sum(1 for e in report.lines if e[1].endswith(">= reference - 1")) == 14
    # The short fp8 cases are judged by their time against bf16's, the long ones by % of copy.
    ratio = line(report, 5, "fp8 per-tensor uniform_B1_Sq1_H16_L131072 time / bf16")
    assert ratio[2] == pytest.approx(35.712 / 55.552, abs=1e-3) and ratio[5] == "<=" and not ratio[6]
    assert line(report, 5, "fp8 per-tensor lognormal_H16_Sq1 % of copy")[6]
    assert not line(report, 5, "fp8 per-block lognormal_H64_Sq1 % of copy")[6]
    assert line(report, 5, "fp8 per-block paged_lognormal_H16_Sq1_P32 time / page 64")[6]
    assert "33 of 55 bars hold" in report.text()


def test_rejects_suites_given_in_the_wrong_order():
    out = subprocess.run([sys.executable, os.path.join(BENCH, "acceptance.py"), RESULTS[1], RESULTS[0], RESULTS[2]],
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert "expected a bf16 suite as file 1" in out.stderr and "the file has kv_dtype ['fp8_e4m3']" in out.stderr


def test_several_runs_give_each_bar_its_median_and_best_run():
    two = [acceptance.load(p) for p in RESULTS + RESULTS]
    public = acceptance.public_cases(os.path.join(BENCH, "cases.json"))
    reports = [acceptance.evaluate(*two[k:k + 3], public) for k in (0, 3)]
    # Make the second run differ: B1 faster in it, so its best run holds and the median does not.
    b1 = [i for i, e in enumerate(reports[1].lines) if e[1] == "uniform_B1_Sq1_H16_L131072 % of copy"][0]
    entry = list(reports[1].lines[b1])
    entry[2] = 66.0
    reports[1].lines[b1] = tuple(entry)
    text = acceptance.summarize(reports, public).splitlines()
    row = [t for t in text if "uniform_B1_Sq1_H16_L131072 % of copy" in t][0]
    assert row.startswith("FAIL  PASS") and "median   64.987 best   66.000" in row, row
    ref = [t for t in text if "uniform_B64_Sq1_H128_L8192 >= reference - 1" in t][0]
    assert "reference median - 1 = 54.9: fails" in ref, ref
    ratio = [t for t in text if "fp8 per-tensor uniform_B1_Sq1_H16_L131072 time / bf16" in t][0]
    assert "best    0.643" in ratio, ratio  # a time ratio: the smaller run is the best
    assert text[-1] == "33 of 55 bars hold on the median of 2 runs, 34 on the best run (eager figures)"


def test_several_runs_hold_the_same_bars_when_a_bf16_time_crosses_150_us():
    import copy
    first = [acceptance.load(p) for p in RESULTS]
    second = copy.deepcopy(first)
    name = "uniform_B128_Sq1_H16_L4096"
    long_us = [r for r in first[0]["results"] if r["case"] == name][0]["median_us"]
    assert long_us > acceptance.LONG_US
    for r in second[0]["results"]:
        if r["case"] == name:
            r["median_us"] = 140.0
    public = acceptance.public_cases(os.path.join(BENCH, "cases.json"))
    # Alone, each run gets its own bar for the case ...
    assert any(e[1] == f"fp8 per-tensor {name} % of copy" for e in acceptance.evaluate(*first, public).lines)
    assert any(e[1] == f"fp8 per-tensor {name} time / bf16" for e in acceptance.evaluate(*second, public).lines)
    # ... together, both the bar of the median bf16 time (here the mean of the two).
    bf16_us = acceptance.median_bf16_times([first[0], second[0]], public)
    assert bf16_us[name] == pytest.approx(0.5 * (long_us + 140.0))
    reports = [acceptance.evaluate(*run, public, bf16_us) for run in (first, second)]
    assert [e[1] for e in reports[0].lines] == [e[1] for e in reports[1].lines]
    want = "% of copy" if bf16_us[name] > acceptance.LONG_US else "time / bf16"
    assert any(e[1] == f"fp8 per-tensor {name} {want}" for e in reports[0].lines)
    assert acceptance.summarize(reports, public).endswith("(eager figures)")


def test_several_runs_need_whole_trios():
    out = subprocess.run([sys.executable, os.path.join(BENCH, "acceptance.py")] + RESULTS + RESULTS[:2],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "5 files given; each run needs three" in out.stderr


def test_readme_table_takes_each_cell_as_the_median_of_the_runs():
    import readme_table
    runs = [acceptance.load(p) for p in RESULTS]
    faster = [acceptance.load(p) for p in RESULTS]
    for r in faster[0]["results"]:
        r["median_us"] *= 0.5
    cases = acceptance.load(os.path.join(BENCH, "cases.json"))["cases"]

    def b1(trios):
        line = [t for t in readme_table.rows(trios, cases) if t.startswith("| uniform_B1_Sq1_H16_L131072 |")][0]
        return line.split(" | ")

    one = readme_table.rows([runs], cases)
    assert not any(line.startswith("| fp8") for line in one)  # the dtype copies repeat rows
    assert b1([runs])[1] == "55.6" and b1([runs])[7] == "0.64"  # 55.552 us; 35.712 / 55.552
    # Two of three runs unchanged: every cell is theirs; two halved bf16 runs: theirs.
    assert readme_table.rows([runs, faster, runs], cases) == one
    assert b1([faster, runs, faster])[1] == "27.8" and b1([faster, runs, faster])[7] == "1.29"
