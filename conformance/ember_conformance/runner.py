"""Running cases in worker subprocesses, so that a kernel that segfaults or hangs costs one case
(verdict ``crash`` or ``timeout``), not the run.

Cases go to workers in batches (a few dozen ids per message, grouped by op so each worker builds
few sample sets); each worker answers one line per case.  A worker that dies mid-batch is judged
on the case it was running and replaced; the rest of its batch goes to the new worker.
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ember_conformance import verdicts
from ember_conformance.execute import parse_case_id

BATCH = 48


@dataclass
class WorkerConfig:
    device: str
    plugins: list[str] = field(default_factory=list)
    prefer: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    demo_epochs: int = 10
    timeout: float = 60.0  # seconds per case
    demo_timeout: float = 900.0
    log_dir: Path | None = None


class WorkerDied(Exception):
    pass


class Worker:
    """One worker process and the pipe to it."""

    def __init__(self, config: WorkerConfig, slot: int) -> None:
        self.config = config
        log = open(config.log_dir / f"worker-{slot}.log", "ab") if config.log_dir else subprocess.DEVNULL
        self.log_path = config.log_dir / f"worker-{slot}.log" if config.log_dir else None
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "ember_conformance.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log, env=env)
        if log is not subprocess.DEVNULL:
            log.close()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)
        self.buffer = b""
        self.send({"device": config.device, "plugins": config.plugins, "prefer": config.prefer,
                   "exclude": config.exclude, "demo_epochs": config.demo_epochs})
        try:
            ready = self.read(120.0)
        except TimeoutError:
            self.kill()
            raise WorkerDied("the worker did not start within 120 s" + self.log_tail()) from None
        except WorkerDied:
            self.kill()
            raise
        if not ready.get("ready"):
            raise WorkerDied(f"worker did not start: {ready}")

    def send(self, message: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerDied("the worker exited") from None

    def read(self, timeout: float) -> dict:
        """The next JSON line; raises TimeoutError, or WorkerDied when the process ends."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if not self.selector.select(left):
                continue
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise WorkerDied(self.describe_exit())
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def describe_exit(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        what = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
        return f"the worker {what}" + self.log_tail()

    def log_tail(self, lines: int = 15) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n" + "\n".join(tail)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.selector.close()


def _verdict_for(case: str, verdict: str, message: str) -> verdicts.CaseResult:
    level, op, dtype, sample = parse_case_id(case)
    return verdicts.CaseResult(id=case, level=level, op=op, dtype=dtype, sample=sample, verdict=verdict,
                               message=message)


def batches(ids: list[str]) -> list[list[str]]:
    """Consecutive ids of one (level, op, dtype) group stay together, up to BATCH per message."""
    out: list[list[str]] = []
    for case in ids:
        group = case.rsplit("/", 1)[0]
        if out and len(out[-1]) < BATCH and out[-1][-1].rsplit("/", 1)[0] == group:
            out[-1].append(case)
        elif out and len(out[-1]) < BATCH // 4:  # small groups share a message
            out[-1].append(case)
        else:
            out.append([case])
    return out


def run_cases(ids: list[str], config: WorkerConfig, jobs: int,
              on_result: Callable[[verdicts.CaseResult], None]) -> list[verdicts.CaseResult]:
    work: queue.Queue[list[str]] = queue.Queue()
    for batch in batches(ids):
        work.put(batch)
    results: list[verdicts.CaseResult] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def record(result: verdicts.CaseResult) -> None:
        with lock:
            results.append(result)
            on_result(result)

    def drive(slot: int) -> None:
        worker: Worker | None = None
        try:
            while True:
                try:
                    batch = work.get_nowait()
                except queue.Empty:
                    return
                while batch:
                    if worker is None:
                        try:
                            worker = Worker(config, slot)
                        except WorkerDied as exc:
                            for case in batch:
                                record(_verdict_for(case, verdicts.CRASH, f"no worker could start: {exc}"))
                            break
                    worker.send({"ids": batch})
                    while batch:
                        case = batch[0]
                        limit = config.demo_timeout if case.startswith("L4/") else config.timeout
                        try:
                            record(verdicts.CaseResult.from_json(worker.read(limit)))
                            batch = batch[1:]
                        except TimeoutError:
                            worker.kill()
                            record(_verdict_for(case, verdicts.TIMEOUT, f"no answer within {limit:g} s"
                                                + worker.log_tail(5)))
                            worker, batch = None, batch[1:]
                            break
                        except WorkerDied as exc:
                            worker.kill()
                            record(_verdict_for(case, verdicts.CRASH, str(exc)))
                            worker, batch = None, batch[1:]
                            break
        except BaseException as exc:  # a runner bug: surface it instead of hanging
            failures.append(exc)
        finally:
            if worker is not None:
                worker.kill()

    threads = [threading.Thread(target=drive, args=(i,), daemon=True) for i in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    order = {case: i for i, case in enumerate(ids)}
    return sorted(results, key=lambda r: order.get(r.id, len(order)))
