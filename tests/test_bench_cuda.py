"""bench/bench_cuda.py where it cannot measure: its help, and the skip (exit 77, the reason named)
that gpu_check.sh reports when ember or PyTorch has no CUDA device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_cuda.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no CUDA device for ember or PyTorch, on any machine
    return subprocess.run([sys.executable, str(BENCH), *args], env=hidden, capture_output=True, text=True, timeout=60)


def test_help_names_the_options():
    done = _run("--help")
    assert done.returncode == 0
    for option in ("--rounds", "--sizes", "--matmul-size", "--json"):
        assert option in done.stdout


def test_without_a_cuda_device_it_says_why_and_exits_77(tmp_path):
    done = _run("--json", str(tmp_path / "rows.json"))
    assert done.returncode == 77, done.stderr
    assert done.stdout.startswith("bench_cuda: skipped: ")
    assert "no CUDA device" in done.stdout or "not installed" in done.stdout
    assert not (tmp_path / "rows.json").exists()
