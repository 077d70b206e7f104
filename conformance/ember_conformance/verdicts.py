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
GOOD = frozenset({PASS, COMPOSITE})  # correct, on the device (natively or as a composite of native kernels)
NOT_COVERED = frozenset({FALLBACK, UNSUPPORTED})  # the device did not run it: never a pass
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


# What each level proves about the backend itself (shown in every report beside the level's status).
REQUIREMENTS = {
    0: "the backend contract: discovery, ABI, availability, properties, allocator, copies, synchronize, RNG, "
       "manifest",
    1: "every op in its primary dtype runs on the device natively (the primitives of core.toml and elementwise.toml) "
       "or as a composite of native kernels, and matches the float64 reference; nothing through the host fallback",
    2: "every op:dtype the manifest claims matches the reference; other dtypes are counted as not covered",
    3: "float32 gradients match finite differences with the fallback policy 'error' (no host fallback)",
    4: "the demo trains to the reference accuracy with the fallback policy 'error' (no host fallback)",
}
# Levels whose every case must run on the device: a fallback or unsupported case fails them.
FULL_COVERAGE = frozenset({1})


@dataclass
class LevelStatus:
    level: int
    status: str  # passed | failed | skipped | not run
    counts: dict[str, int]
    reason: str = ""
    requirement: str = ""


def _judge(level: int, mine: list[CaseResult], below: LevelStatus | None) -> LevelStatus:
    counts = dict(Counter(r.verdict for r in mine))
    status = LevelStatus(level, "failed", counts, requirement=REQUIREMENTS.get(level, ""))
    bad = sum(counts.get(v, 0) for v in BAD)
    uncovered = sorted({r.op for r in mine if r.verdict in NOT_COVERED})
    if not mine:
        status.reason = "no case was collected"
    elif bad:
        status.reason = f"{bad} bad cases"
    elif level in FULL_COVERAGE and uncovered:
        status.reason = f"{len(uncovered)} ops not covered on the device: {', '.join(uncovered[:12])}"
    elif all(r.verdict == SKIP for r in mine):
        status.status, status.reason = "skipped", mine[0].message
    elif below is not None and below.status != "passed" and below.counts:  # (a level not run does not count)
        status.reason = f"level {below.level} is not passed"
    else:
        status.status = "passed"
    return status


def judge_levels(results: list[CaseResult], levels: list[int]) -> dict[int, LevelStatus]:
    """A level passes when it has cases, none failed, crashed or timed out, not all were skipped,
    the level below it passed, and (level 1) nothing ran through the host fallback or was unsupported.
    Fallback is never a pass: at level 2 such cases are counted as not covered."""
    out: dict[int, LevelStatus] = {}
    for level in levels:
        out[level] = _judge(level, [r for r in results if r.level == level], out.get(level - 1))
    return out
