"""The suite's own parts: the tolerance table and ULP distances, deterministic case ids, the
report's schema, diff, level judging, and pytest's zero-cases rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ember_conformance import REPORT_SCHEMA_VERSION, cases, coverage, diff, report, verdicts
from ember_conformance.tolerances import compare, round_to_bfloat16, ulp_distance


def test_ulp_distance_counts_representable_values() -> None:
    one = np.float32(1)
    got = np.array([one, np.nextafter(one, np.float32(2)), np.float32(-0.0)], dtype=np.float64)
    assert ulp_distance(got, np.array([1.0, 1.0, 0.0]), "float32").tolist() == [0, 1, 0]
    assert ulp_distance(np.array([1.0078125]), np.array([1.0]), "bfloat16").tolist() == [1]


def test_compare_catches_nan_inf_and_value_errors() -> None:
    assert compare(np.float32([1, np.nan]), [1, np.nan], "float32").ok
    assert not compare(np.float32([1, 2]), [1, np.nan], "float32").ok
    assert not compare(np.float32([np.inf]), [-np.inf], "float32").ok
    bad = compare(np.float32([1, 2.001]), [1, 2], "float32")
    assert not bad.ok and bad.max_ulp > 1000 and "differ" in bad.message
    assert compare(np.int8([1, 2]), np.array([1, 2]), "int8").ok
    assert not compare(np.int8([1, 3]), np.array([1, 2]), "int8").ok


def test_accumulating_ops_are_judged_against_their_magnitude() -> None:
    # 1e8 + 1 - 1e8 in float32 loses the 1: wrong relative to the result, fine relative to the terms
    assert not compare(np.float32([0.0]), [1.0], "float32").ok
    assert compare(np.float32([0.0]), [1.0], "float32", magnitude=[2e8 + 1]).ok


def test_bfloat16_rounding_is_to_nearest_even() -> None:
    assert round_to_bfloat16([1.00390625, 1.01171875]).tolist() == [1.0, 1.015625]


def test_case_ids_are_deterministic_and_cover_every_level() -> None:
    opts = cases.Options("cpu", 4)
    ids = cases.case_ids(opts)
    assert ids == cases.case_ids(opts) and len(ids) == len(set(ids))
    assert {i.split("/")[0] for i in ids} >= {"L0", "L1", "L2", "L4"}
    assert "L1/add/float32/extremes" in ids and "L2/add/int8/scalar-left" in ids


def _result(case: str, verdict: str) -> verdicts.CaseResult:
    level, op, dtype, sample = case.split("/")
    return verdicts.CaseResult(id=case, level=int(level[1]), op=op, dtype=dtype, sample=sample, verdict=verdict,
                               how="native", provider="cpu")


def test_levels_fail_on_bad_cases_and_on_no_cases() -> None:
    results = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", "composite"),
               _result("L2/add/int8/a", "crash")]
    levels = verdicts.judge_levels(results, [0, 1, 2, 3])
    assert [levels[n].status for n in range(4)] == ["passed", "passed", "failed", "failed"]
    assert levels[3].reason == "no case was collected"
    assert all(levels[n].requirement for n in range(4))


def test_fallback_is_never_a_pass() -> None:
    """Level 1 fails on an op the device did not run; level 2 counts it as not covered but fails
    only on claimed pairs that are wrong; a level above one that is not passed is not passed."""
    for uncovered in ("fallback", "unsupported"):
        results = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", uncovered),
                   _result("L2/add/int8/a", "pass")]
        levels = verdicts.judge_levels(results, [0, 1, 2])
        assert levels[1].status == "failed" and "not covered" in levels[1].reason and "add" in levels[1].reason
        assert levels[2].status == "failed" and levels[2].reason == "level 1 is not passed"
    results = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", "pass"),
               _result("L2/add/int8/a", "fallback")]
    assert verdicts.judge_levels(results, [0, 1, 2])[2].status == "passed"


def test_report_schema_and_diff(tmp_path: Path) -> None:
    old = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", "pass"), _result("L1/sin/float32/a", "fail")]
    new = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", "fail"), _result("L1/sin/float32/a", "pass")]
    reports = []
    for name, results in (("old", old), ("new", new)):
        rep = report.build("cpu", {}, results, verdicts.judge_levels(results, [0, 1]), 1.0)
        report.write_all(rep, tmp_path / name)
        reports.append(rep)
    data = diff.load(tmp_path / "new" / "report.json")
    assert data["schema_version"] == REPORT_SCHEMA_VERSION
    assert {"ember", "suite", "abi", "python", "packages", "plugins"} <= set(data["environment"])
    assert data["matrix"]["add:float32"]["provider"] == "cpu"
    assert "L1/add/float32/a" in (tmp_path / "new" / "report.html").read_text()
    changes = diff.compare(*reports)
    assert [c.split(":")[0] for c in changes["regressions"]] == ["L1/add/float32/a"]
    assert [c.split(":")[0] for c in changes["fixes"]] == ["L1/sin/float32/a"]
    code = subprocess.run([sys.executable, "-m", "ember_conformance", "diff", str(tmp_path / "old" / "report.json"),
                           str(tmp_path / "new" / "report.json")], capture_output=True, text=True).returncode
    assert code == 1


def test_diff_counts_lost_coverage_and_lost_levels_and_refuses_old_reports(tmp_path: Path) -> None:
    old = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", "pass")]
    new = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", "fallback")]
    reports = [report.build("cpu", {}, r, verdicts.judge_levels(r, [0, 1]), 1.0) for r in (old, new)]
    assert sorted(c.split(":")[0] for c in diff.compare(*reports)["regressions"]) == ["L1/add/float32/a", "level 1"]
    assert [c.split(":")[0] for c in diff.compare(*reversed(reports))["fixes"]] == ["L1/add/float32/a", "level 1"]
    reports[0]["schema_version"] = 1
    path = tmp_path / "v1.json"
    report.write_json(reports[0], path)
    with pytest.raises(diff.ReportError, match="version 1 report"):
        diff.load(path)
    proc = subprocess.run([sys.executable, "-m", "ember_conformance", "diff", str(path), str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "rerun the suite" in proc.stderr


def test_pytest_run_that_selects_no_case_fails() -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
                           "ember_conformance", "--ember-device", "cpu", "--ember-level", "1", "--ember-ops", "add",
                           "-k", "no_such_case"], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout[-2000:]


def test_report_headline_facts_and_readable_reasons(tmp_path: Path) -> None:
    results = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", "pass"),
               _result("L1/sin/float32/a", "fallback"), _result("L1/exp/float32/a", "skip"),
               _result("L2/add/int8/a", "xfail")]
    results[2].how, results[3].message, results[4].message = "fallback", "no sampler yet", "declared off by one"
    rep = report.build("cpu", {"prefer": ["xnnpack"]}, results, verdicts.judge_levels(results, [0, 1, 2]), 1.0)
    assert rep["coverage"]["1"]["float32"]["not_covered_ops"] == ["sin"]
    assert "level 1 float32: native 1 of 3 ops (composite 0, not covered 1, skipped 1)" in coverage.headlines(rep)
    assert rep["providers"] == {"cpu": ["add"]}
    assert rep["not_covered"] == {"sin": 1}
    report.write_all(rep, tmp_path)
    for page in ("summary.md", "report.html"):
        text = (tmp_path / page).read_text()
        assert "native 1 of 3 ops" in text and "numerics settings" in text and "xnnpack" in text
        assert "most needed first" in text and "sin (1)" in text
        assert verdicts.REQUIREMENTS[1][:40] in text
    page = (tmp_path / "report.html").read_text()
    assert "no sampler yet" in page and "declared off by one" in page and "{'" not in page


def test_scoreboard_is_op_by_backend(tmp_path: Path) -> None:
    from ember_conformance import scoreboard

    a = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", "pass"), _result("L1/sin/float32/a", "fail")]
    b = [_result("L0/abi/-/check", "pass"), _result("L1/add/float32/a", "fallback")]
    reports = [report.build(device, {"prefer": prefer}, r, verdicts.judge_levels(r, [0, 1]), 1.0)
               for device, prefer, r in (("cpu", [], a), ("cpu", ["xnnpack"], b))]
    assert [scoreboard.op_states(r) for r in reports] == [{"add": "native", "sin": "failing"}, {"add": "not covered"}]
    paths = []
    for i, rep in enumerate(reports):
        report.write_json(rep, tmp_path / f"r{i}.json")
        paths.append(str(tmp_path / f"r{i}.json"))
    out = tmp_path / "board.html"
    proc = subprocess.run([sys.executable, "-m", "ember_conformance", "scoreboard", *paths, "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert "cpu (prefer xnnpack)" in page and "not covered" in page
    assert "native 2 of 2 ops (composite 0, not covered 0, failing 1)" in page
