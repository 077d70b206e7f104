"""The GPU check without a GPU: gpu_check.sh writes its summary and archive whatever its parts do,
stops a part that runs past its time and keeps to its budget; the smoke test's checks and
bench_cuda's measurement run on ember-gpu's fake driver (PyTorch on the CPU), so what the GPU
machine runs has run before it gets there."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.no_device

PLUGIN_DIR = Path(__file__).resolve().parent.parent
ROOT = PLUGIN_DIR.parent.parent


def _gpu_check(out: Path, **env: str) -> tuple[subprocess.CompletedProcess, str, float]:
    """gpu_check.sh run with CUDA hidden (CUDA_VISIBLE_DEVICES=''), so it behaves the same on any machine."""
    environment = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", **env}
    begin = time.monotonic()
    done = subprocess.run(["bash", str(PLUGIN_DIR / "gpu_check.sh"), str(out)], env=environment, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    summary = (out / "summary.md").read_text() if (out / "summary.md").exists() else ""
    return done, summary, time.monotonic() - begin


def test_parts_without_a_device_are_skipped_and_everything_is_written(tmp_path):
    done, summary, _ = _gpu_check(tmp_path, GPU_CHECK_ONLY="smoke bench-cuda")
    assert done.returncode == 0, done.stderr
    assert "| smoke | skipped |" in summary and "no CUDA device" in summary
    assert "| bench-cuda | skipped |" in summary and "bench_cuda: skipped" in summary
    assert summary in done.stdout  # the table is printed too
    with tarfile.open(tmp_path / "gpu-check.tar.gz") as archive:
        names = {Path(name).name for name in archive.getnames()}
    assert {"summary.md", "smoke.log", "bench-cuda.log"} <= names


def test_a_part_past_its_time_is_stopped_and_the_budget_is_kept(tmp_path):
    done, summary, seconds = _gpu_check(tmp_path, GPU_CHECK_ONLY="bench-core bench-train", GPU_CHECK_BUDGET="6")
    assert done.returncode == 1
    assert "| bench-core | timeout (" in summary  # bench_core.py takes far longer than 6 s
    assert "| bench-train | not run | 0 | the check's budget of 6 s is spent |" in summary
    assert seconds < 20 and (tmp_path / "gpu-check.tar.gz").stat().st_size > 0


def test_an_unknown_part_is_refused(tmp_path):
    done, _, _ = _gpu_check(tmp_path, GPU_CHECK_ONLY="smoke-test")
    assert done.returncode == 2 and "no part named 'smoke-test'" in done.stderr


@pytest.fixture
def smoke():
    spec = importlib.util.spec_from_file_location("gpu_smoke", PLUGIN_DIR / "gpu_smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _emulate_add(fake, launch) -> None:
    """eg_binary_add_float32_flat32 on the fake: abi.h's eg_flat_args are out, in[3], n, scalar_inputs."""
    out, first, second, _, n, _, _ = struct.unpack("<4QqII", launch.args)
    a, b = (np.frombuffer(fake.read(pointer, 4 * n), np.float32) for pointer in (first, second))
    fake.write(out, (a + b).tobytes())


def test_the_smoke_checks_run_on_the_fake_driver(fake_cuda, smoke):
    assert "cuda:1 NVIDIA Fake H200 (compute capability 9.0" in smoke.check_devices()
    fake_cuda.kernels["eg_binary_add_float32_flat32"] = lambda fake, launch: None  # a kernel that writes nothing
    with pytest.raises(AssertionError, match="1000003 of 1000003 elements differ"):
        smoke.check_kernel()  # the output keeps its NaN poison
    fake_cuda.kernels["eg_binary_add_float32_flat32"] = _emulate_add
    assert "equals numpy's a + b" in smoke.check_kernel()
    ran = smoke.check_ops()
    assert ran.startswith("6 ops match numpy") and "add" in ran and "matmul" in ran


def test_the_smoke_test_reports_every_check_and_fails_when_one_does(fake_cuda, smoke, monkeypatch, capsys):
    def absent() -> str:
        raise smoke.Skip("not here")

    def broken() -> str:
        raise RuntimeError("it broke")

    monkeypatch.setattr(smoke, "CHECKS", [("absent", absent), ("broken", broken), ("devices", smoke.check_devices)])
    assert smoke.main() == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "skip absent: not here" and lines[1] == "FAIL broken: RuntimeError: it broke"
    assert lines[2].startswith("ok   devices: cuda:0") and lines[3] == "gpu_smoke: 1 ok, 1 failed, 1 skipped"


@pytest.fixture
def bench(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return importlib.import_module("bench_cuda")


def test_bench_cuda_measures_ember_on_the_fake_against_pytorch(fake_cuda, bench, tmp_path, capsys):
    todo = bench.cases([1 << 12], 16, rows=(2, 4, 8), conv=((1, 2, 5, 5), (3, 2, 3, 3)))
    broken = bench.Case("broken", "us", 1e6, None, ((4,),), "float32", lambda xp, a: 1 / 0)
    header = {"gpu": "NVIDIA Fake H200", "ember_tf32": False}
    rows = bench.run([broken, *todo], bench.ember_side("cuda:0"), bench.torch_side("cpu"), 1, header,
                     tmp_path / "rows.json", min_time=0.001)
    assert [row.case for row in rows] == [case.name for case in todo]  # the broken case cost no other
    for row in rows:
        assert row.ember > 0 and row.torch > 0 and row.ratio > 0
        assert row.ember_ran in {"native", "composite", "fallback"}
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "gpu=NVIDIA Fake H200, ember_tf32=False" and printed[1].startswith("| case | unit | ember |")
    assert printed[3] == "| broken | failed: ZeroDivisionError: division by zero |"
    assert [line.count("|") for line in printed[4:-1]] == [8] * len(todo)
    assert printed[-1].startswith(f"bench_cuda: {len(todo) + 1} cases on NVIDIA Fake H200: ")
    assert printed[-1].endswith(", 1 failed")
    saved = json.loads((tmp_path / "rows.json").read_text())
    assert [r["case"] for r in saved["rows"]] == [c.name for c in todo] and list(saved["failed"]) == ["broken"]


def test_bench_cuda_turns_tf32_off_and_passes_its_options_on(fake_cuda, bench, monkeypatch, tmp_path):
    from ember_gpu import blas

    monkeypatch.setattr(blas, "_tf32", True)  # as EMBER_ALLOW_TF32=1 would
    monkeypatch.setattr(bench, "unavailable", lambda: None)  # PyTorch's CUDA: its CPU stands in
    monkeypatch.setattr(bench, "torch_side", lambda device, side=bench.torch_side: side("cpu"))
    seen = {}

    def run(todo, ember, torch, rounds, header, json_path):
        seen.update(locals())
        return todo  # every case measured

    monkeypatch.setattr(bench, "run", run)
    assert bench.main(["--sizes", "4K,1M", "--matmul-size", "64", "--rounds", "2", "--json", str(tmp_path / "j")]) == 0
    assert seen["header"]["ember_tf32"] is False and seen["header"]["gpu"] == "NVIDIA Fake H200"
    assert [case.name for case in seen["todo"]][1:9:4] == ["add, 4096 float32", "add, 1M float32"]
    names = [case.name for case in seen["todo"]]
    assert "matmul 64^3 float16" in names and names[-1].startswith("conv2d 8x64x56x56 -> 64, 3x3, TF32 on")
    assert seen["rounds"] == 2 and seen["json_path"].name == "j"
