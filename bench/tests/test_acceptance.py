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
    assert "expected a bf16 suite, the file has kv_dtype ['fp8_e4m3']" in out.stderr
