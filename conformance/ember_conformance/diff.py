"""``ember-conformance diff OLD.json NEW.json``: what got worse (regressions), what got better
(fixes), and which cases changed how they run (a provider took over).

A regression is a case that became bad (fail, crash, timeout), a case the device ran that it no
longer covers (now fallback or unsupported), or a level that passed and no longer does.  Reports
of another schema version are refused: their verdicts mean something else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ember_conformance import REPORT_SCHEMA_VERSION, verdicts


class ReportError(ValueError):
    """A file diff cannot compare: not a report, or a report of another schema version."""


def load(path: str | Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != "ember-conformance-report":
        raise ReportError(f"{path} is not an ember-conformance report")
    version = data.get("schema_version")
    if version != REPORT_SCHEMA_VERSION:
        raise ReportError(f"{path} is a version {version} report; this suite writes version {REPORT_SCHEMA_VERSION}, "
                          f"whose verdicts differ (since version 2 fallback is never a pass): rerun the suite "
                          f"on the old state to compare")
    return data


def slim(report: dict[str, Any]) -> dict[str, Any]:
    """What a committed baseline keeps of a report: the levels and each case's verdict and provider."""
    keep = ("schema", "schema_version", "device", "options")
    levels = {n: {"status": lv["status"], "reason": lv.get("reason", "")} for n, lv in report["levels"].items()}
    cases = [{k: c[k] for k in ("id", "verdict", "provider") if k in c} for c in report["cases"]]
    return {**{k: report[k] for k in keep}, "levels": levels, "cases": cases}


def write_baseline(report: dict[str, Any], path: Path) -> None:
    """One case per line, so that a baseline's git diff reads as the list of changed verdicts."""
    head = json.dumps({k: v for k, v in slim(report).items() if k != "cases"}, indent=1)[:-2]
    cases = ",\n".join(json.dumps(c) for c in slim(report)["cases"])
    path.write_text(f'{head},\n "cases": [\n{cases}\n]}}\n')


def _rank(verdict: str) -> int:
    """2: correct on the device; 1: not covered; 0: bad.  Skips and xfails are not ranked (-1)."""
    if verdict in verdicts.GOOD:
        return 2
    if verdict in verdicts.NOT_COVERED:
        return 1
    return 0 if verdict in verdicts.BAD else -1


def _worse(a: str, b: str) -> bool:
    return _rank(b) >= 0 and _rank(a) > _rank(b)


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[str]]:
    before = {c["id"]: c for c in old["cases"]}
    after = {c["id"]: c for c in new["cases"]}
    out: dict[str, list[str]] = {"regressions": [], "fixes": [], "changed": [], "new": [], "removed": []}
    for case, now in after.items():
        was = before.get(case)
        if was is None:
            out["new"].append(f"{case}: {now['verdict']}")
            continue
        a, b = was["verdict"], now["verdict"]
        line = f"{case}: {a} -> {b}" + (f" ({now.get('message', '')[:160]})" if b in verdicts.BAD else "")
        if _worse(a, b):
            out["regressions"].append(line)
        elif _worse(b, a):
            out["fixes"].append(line)
        elif a != b or was.get("provider") != now.get("provider"):
            out["changed"].append(f"{line} [{was.get('provider')} -> {now.get('provider')}]")
    out["removed"] = [f"{case}: {c['verdict']}" for case, c in before.items() if case not in after]
    for n, level in new.get("levels", {}).items():
        was = old.get("levels", {}).get(n, {}).get("status")
        if was == "passed" and level["status"] != "passed":
            out["regressions"].append(f"level {n}: passed -> {level['status']} ({level.get('reason', '')})")
        elif was not in (None, "passed") and level["status"] == "passed":
            out["fixes"].append(f"level {n}: {was} -> passed")
    return out


def render(changes: dict[str, list[str]], limit: int = 200) -> str:
    lines = []
    for key in ("regressions", "fixes", "changed", "new", "removed"):
        items = changes[key]
        lines.append(f"{key}: {len(items)}")
        lines += [f"  {item}" for item in items[:limit]]
        if len(items) > limit:
            lines.append(f"  ... {len(items) - limit} more")
    return "\n".join(lines)
