"""A one-line progress bar on stderr (a line per 10% when stderr is not a terminal)."""

from __future__ import annotations

import sys
import time
from collections import Counter

from ember_conformance import verdicts


class Progress:
    def __init__(self, total: int, label: str, enabled: bool = True) -> None:
        self.total, self.label, self.enabled = total, label, enabled
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.start = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.next_tenth = 1

    def update(self, result: verdicts.CaseResult) -> None:
        self.done += 1
        self.counts[result.verdict] += 1
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty and (now - self.last > 0.1 or self.done == self.total):
            self.last = now
            sys.stderr.write("\r" + self.line() + ("\n" if self.done == self.total else ""))
            sys.stderr.flush()
        elif not self.tty and self.done * 10 >= self.next_tenth * self.total:
            self.next_tenth += 1
            print(self.line(), file=sys.stderr, flush=True)

    def line(self) -> str:
        width = 30
        filled = width * self.done // max(self.total, 1)
        bad = " ".join(f"{v} {self.counts[v]}" for v in (verdicts.FAIL, verdicts.CRASH, verdicts.TIMEOUT)
                       if self.counts[v])
        return (f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{time.monotonic() - self.start:5.1f}s {bad}")
