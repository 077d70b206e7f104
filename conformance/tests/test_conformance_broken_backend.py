"""The suite judges a deliberately broken backend (broken_backend.py) exactly as it should: a wrong
result fails, a segfault is a crash and a hang a timeout (and the run goes on), a declared xfail is
xfail, a lying manifest fails the level-0 honesty check, unclaimed ops fall back (never a pass), a
plugin missing a required hook fails discovery, and a backend without kernels passes level 0 only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
OPS = "add,multiply,subtract,maximum,abs,negative,sin"


def _run(tmp: Path, plugin: str, device: str, *extra: str) -> tuple[int, str, dict]:
    cmd = [sys.executable, "-m", "ember_conformance", "run", "--device", device, "--plugin",
           f"{HERE / 'broken_backend.py'}:{plugin}", "--out", str(tmp), "--no-progress", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    report = json.loads((tmp / "report.json").read_text())
    return proc.returncode, proc.stdout, {c["id"]: c for c in report["cases"]}


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    return _run(tmp_path_factory.mktemp("broken"), "Broken", "broken", "--level", "2", "--ops", OPS,
                "--dtypes", "float32", "float64", "--timeout", "3")


def test_wrong_result_fails_with_statistics_and_reproducer(broken: tuple[int, str, dict]) -> None:
    case = broken[2]["L1/add/float32/same-shape"]
    assert case["verdict"] == "fail"
    assert case["max_abs_error"] > 0 and case["max_rel_error"] > 1e-4 and case["max_ulp"] > 1000
    assert set(case["tolerance"]) == {"rtol", "atol"}
    compile(case["reproducer"], "<reproducer>", "exec")
    assert "em.ops.call('add', x1, x2)" in case["reproducer"]
    assert broken[2]["L1/add/float32/zero-size"]["verdict"] == "pass"  # no element, nothing wrong
    assert broken[2]["L1/add/float32/error-shape-mismatch"]["verdict"] == "pass"


def test_segfault_is_a_crash_and_the_run_goes_on(broken: tuple[int, str, dict]) -> None:
    cases = broken[2]
    assert cases["L1/multiply/float32/long"]["verdict"] == "crash"
    assert "signal 11" in cases["L1/multiply/float32/long"]["message"]
    assert cases["L1/multiply/float32/scalar-right"]["verdict"] == "pass"  # after the crash


def test_hang_is_a_timeout_and_the_run_goes_on(broken: tuple[int, str, dict]) -> None:
    cases = broken[2]
    assert cases["L1/subtract/float32/long"]["verdict"] == "timeout"
    assert cases["L1/subtract/float32/scalar-right"]["verdict"] == "pass"


def test_declared_xfail(broken: tuple[int, str, dict]) -> None:
    case = broken[2]["L1/maximum/float32/same-shape"]
    assert case["verdict"] == "xfail"
    assert "off on purpose" in case["message"]


def test_lying_manifest(broken: tuple[int, str, dict]) -> None:
    cases = broken[2]
    assert cases["L2/abs/float64/contiguous"]["verdict"] == "fail"
    assert cases["L1/abs/float32/contiguous"]["verdict"] == "pass"
    honesty = cases["L0/manifest-claims/-/check"]
    assert honesty["verdict"] == "fail"
    assert "abs:float64 (broken)" in honesty["message"] and "add:float32 (broken)" in honesty["message"]


def test_unclaimed_ops_fall_back_and_correct_ones_pass(broken: tuple[int, str, dict]) -> None:
    cases = broken[2]
    assert cases["L1/sin/float32/contiguous"]["verdict"] == "fallback"
    assert cases["L1/sin/float32/contiguous"]["how"] == "fallback"
    assert cases["L1/negative/float32/strided"]["verdict"] == "pass"
    assert cases["L1/negative/float32/strided"]["provider"] == "broken"


def test_exit_code_and_final_line(broken: tuple[int, str, dict]) -> None:
    code, out, cases = broken
    assert code == 1
    assert "broken: passed no level; level 0 failed" in out.splitlines()[-1]
    assert cases["L0/copies/float32/check"]["verdict"] == "pass"  # the contract parts it does keep


def test_missing_hook_fails_discovery(tmp_path: Path) -> None:
    code, _, cases = _run(tmp_path, "NoSync", "nosync", "--level", "1", "--ops", "add")
    assert code == 1
    discovery = cases["L0/discovery/-/check"]
    assert discovery["verdict"] == "fail" and "ember_synchronize" in discovery["message"]
    assert cases["L1/device/-/unusable"]["verdict"] == "skip"


def test_zero_kernel_backend_passes_level_0_only(tmp_path: Path) -> None:
    """Every op falls back: that covers nothing, so only the contract passes; levels 3 and 4 run
    with the fallback policy 'error', and an error input the host rejected is no pass either."""
    code, out, cases = _run(tmp_path, "ZeroKernel", "zero", "--level", "4", "--ops", "add,softmax,views,demo",
                            "--dtypes", "float32", "float64", "--demo-epochs", "1")
    assert code == 1
    assert out.splitlines()[-1].startswith("zero: passed levels 0; level 1 failed (3 ops not covered")
    assert {c["verdict"] for c in cases.values() if c["level"] == 2} == {"fallback"}
    assert cases["L1/add/float32/error-shape-mismatch"]["verdict"] == "fallback"
    softmax = cases["L1/softmax/float32/last-axis"]
    assert softmax["verdict"] == "fallback" and softmax["how"] == "composite" and softmax["extra"]["fell_back"]
    assert cases["L1/views/float32/permute-dims-strided"]["verdict"] == "pass"  # a view runs no kernel
    assert cases["L1/views/float32/bool-mask-strided"]["verdict"] == "fallback"
    assert "fallback policy is 'error'" in cases["L3/add/float32/same-shape"]["message"]
    assert "fallback policy is 'error'" in cases["L4/demo/float32/digits"]["message"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["levels"]["2"]["reason"] == "level 1 is not passed"


def _exit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember_conformance", *args], capture_output=True, text=True,
                          timeout=300)


def test_unknown_device_is_a_usage_error_listing_the_devices(tmp_path: Path) -> None:
    proc = _exit("run", "--device", "nosuch", "--out", str(tmp_path), "--no-progress")
    assert proc.returncode == 2 and "unknown device 'nosuch'" in proc.stderr and "cpu" in proc.stderr
    assert not (tmp_path / "report.json").exists()


def test_known_type_without_a_device_is_unavailable(tmp_path: Path) -> None:
    proc = _exit("run", "--device", "absent", "--plugin", f"{HERE / 'broken_backend.py'}:Absent", "--out",
                 str(tmp_path), "--no-progress")
    assert proc.returncode == 3
    assert "absent: unavailable: no absent device is plugged in" in proc.stderr


def test_ops_says_which_levels_it_leaves_out(tmp_path: Path) -> None:
    proc = _exit("run", "--device", "broken", "--plugin", f"{HERE / 'broken_backend.py'}:Broken", "--ops", "negative",
                 "--dtypes", "float32", "--out", str(tmp_path), "--no-progress")
    assert "--ops leaves out" in proc.stderr and "level 4" in proc.stderr
    levels = json.loads((tmp_path / "report.json").read_text())["levels"]
    assert levels["4"]["status"] == "not run" and "--ops" in levels["4"]["reason"]


def test_prefer_and_exclude_choose_the_provider_the_report_names(tmp_path: Path) -> None:
    pytest.importorskip("ember_xnnpack")
    for choice, provider in ((["--prefer", "xnnpack"], "xnnpack"), (["--exclude", "xnnpack"], "cpu")):
        out = tmp_path / provider
        _exit("run", "--device", "cpu", *choice, "--ops", "max_pool2d", "--dtypes", "float32", "--level", "1",
              "--out", str(out), "--no-progress")
        report = json.loads((out / "report.json").read_text())
        assert report["providers"] == {provider: ["max_pool2d"]}
        assert f"{provider} (1): max_pool2d" in (out / "summary.md").read_text()


@pytest.mark.parametrize("backend", ["Flusher", "Declared"])
def test_precision_deviations_fail_unless_declared(tmp_path: Path, backend: str) -> None:
    """A backend that flushes float32 denormals and whose sin is 1e-6 off on [-pi, pi]: failures when
    undeclared; with ftz and an absolute bound over [-pi, pi] in the manifest, declared (xfail)."""
    device = backend.lower()
    code, out, cases = _run(tmp_path, backend, device, "--level", "1", "--ops", "numerics,sin", "--dtypes", "float32")
    numerics, sin = cases["L1/numerics/float32/special-values"], cases["L1/sin/float32/contiguous"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["precision"]["sin:float32"]["max_abs"] == pytest.approx(1e-6, rel=0.1)
    if backend == "Flusher":
        assert code == 1
        assert numerics["verdict"] == "fail" and "flushes denormal inputs and denormal outputs" in numerics["message"]
        assert sin["verdict"] == "fail" and sin["max_ulp"] > 10
    else:
        assert code == 0, out
        assert numerics["verdict"] == "pass"
        assert sin["verdict"] == "xfail" and "declared absolute error 2e-06 on [-3.1416, 3.1416]" in sin["message"]
        assert report["precision"]["sin:float32"]["declared"] == {"abs": 2e-6, "range": [-3.1416, 3.1416]}
        assert "declared deviation" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("backend", ["PropertyFlusher", "PropertyKeeper"])
def test_ftz_declared_for_devices_reporting_a_property(tmp_path: Path, backend: str) -> None:
    """ftz declared under ``[[deviations.<type>.when]]`` holds only on a device whose properties match: there
    the numerics check passes and a case that is right once subnormals are flushed (inf * subnormal = NaN,
    subnormal products = 0) is a declared xfail; on a device reporting preserved subnormals both fail."""
    code, out, cases = _run(tmp_path, backend, "propflush", "--level", "1", "--ops", "numerics,multiply,equal",
                            "--dtypes", "float32")
    numerics = cases["L1/numerics/float32/special-values"]
    extremes = [cases[f"L1/{op}/float32/extremes"] for op in ("multiply", "equal")]
    assert cases["L1/multiply/float32/same-shape"]["verdict"] == "pass"
    if backend == "PropertyFlusher":
        assert code == 0, out
        assert numerics["verdict"] == "pass"
        assert [c["verdict"] for c in extremes] == ["xfail", "xfail"]  # equal: subnormal == 0 from flushed inputs
        assert all("declared flush-to-zero of float32 subnormals (ember-propflush)" in c["message"] for c in extremes)
        assert "float32_subnormals=flushed" in (tmp_path / "summary.md").read_text()  # the property it rests on
    else:
        assert code == 1
        assert numerics["verdict"] == "fail" and "undeclared" in numerics["message"]
        assert [c["verdict"] for c in extremes] == ["fail", "fail"]


def test_a_kernel_declared_deterministic_must_repeat_its_bits(tmp_path: Path) -> None:
    code, _, cases = _run(tmp_path, "Wobbly", "wobbly", "--level", "1", "--ops", "add,multiply", "--dtypes", "float32")
    add, multiply = cases["L1/add/float32/same-shape"], cases["L1/multiply/float32/same-shape"]
    assert code == 1
    assert add["verdict"] == "fail" and "declared deterministic (ember-wobbly), but a second run" in add["message"]
    assert multiply["verdict"] == "pass"
