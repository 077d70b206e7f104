"""``ember-conformance diff OLD.json NEW.json``: what got worse (regressions), what got better
(fixes), and which cases changed how they run (a provider took over, a kernel fell back)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ember_conformance import verdicts


def load(path: str | Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != "ember-conformance-report":
        raise ValueError(f"{path} is not an ember-conformance report")
    return data


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
        if b in verdicts.BAD and a not in verdicts.BAD:
            out["regressions"].append(line)
        elif a in verdicts.BAD and b not in verdicts.BAD:
            out["fixes"].append(line)
        elif a != b or was.get("provider") != now.get("provider"):
            out["changed"].append(f"{line} [{was.get('provider')} -> {now.get('provider')}]")
    out["removed"] = [f"{case}: {c['verdict']}" for case, c in before.items() if case not in after]
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
