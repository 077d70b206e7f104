"""Verdicts, the result record of one case, and how a level is judged from its cases."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

PASS, FAIL, XFAIL, SKIP = "pass", "fail", "xfail", "skip"
UNSUPPORTED, FALLBACK, COMPOSITE = "unsupported", "fallback", "composite"
CRASH, TIMEOUT = "crash", "timeout"

VERDICTS = (PASS, COMPOSITE, FALLBACK, XFAIL, SKIP, UNSUPPORTED, FAIL, CRASH, TIMEOUT)
BAD = frozenset({FAIL, CRASH, TIMEOUT})  # any of these fails the case's level
GOOD = frozenset({PASS, COMPOSITE})  # correct, on the device (natively or through the core's composite)
# worst first: the verdict a (op, dtype) cell of the matrix shows is the worst of its samples
SEVERITY = {v: i for i, v in enumerate((CRASH, TIMEOUT, FAIL, FALLBACK, UNSUPPORTED, XFAIL, SKIP, COMPOSITE, PASS))}


@dataclass
class CaseResult:
    """The outcome of one case.  ``how`` is native | composite | fallback | unsupported | core."""

    id: str
    level: int
    op: str
    dtype: str
    sample: str
    verdict: str
    how: str = "core"
    provider: str | None = None
    message: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    max_ulp: float | None = None
    tolerance: dict[str, float] | None = None
    reproducer: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, {}, "")}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseResult:
        return cls(**data)


def worst(verdicts: list[str]) -> str:
    return min(verdicts, key=SEVERITY.__getitem__)


@dataclass
class LevelStatus:
    level: int
    status: str  # passed | failed | skipped | not run
    counts: dict[str, int]
    reason: str = ""


def judge_levels(results: list[CaseResult], levels: list[int]) -> dict[int, LevelStatus]:
    """A level passes when it has cases, none of them failed, crashed or timed out, and not all of
    them were skipped.  Fallback and unsupported cases do not fail a level (the backend did not
    claim them) but never count as passes either: the counts show them."""
    out = {}
    for level in levels:
        mine = [r for r in results if r.level == level]
        counts = dict(Counter(r.verdict for r in mine))
        if not mine:
            out[level] = LevelStatus(level, "failed", counts, "no case was collected")
        elif any(r.verdict in BAD for r in mine):
            out[level] = LevelStatus(level, "failed", counts, f"{sum(counts.get(v, 0) for v in BAD)} bad cases")
        elif all(r.verdict == SKIP for r in mine):
            out[level] = LevelStatus(level, "skipped", counts, mine[0].message)
        else:
            out[level] = LevelStatus(level, "passed", counts)
    return out
