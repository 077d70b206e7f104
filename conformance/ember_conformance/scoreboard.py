"""``ember-conformance scoreboard REPORT... --out FILE``: one static HTML page comparing several
reports (cpu, xnnpack, vulkan, cuda, ...), op by backend, like the ONNX backend scoreboard."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from ember_conformance import coverage, verdicts
from ember_conformance.report import COLORS

STATE_COLORS = {"native": COLORS[verdicts.PASS], "composite": COLORS[verdicts.COMPOSITE],
                "not covered": COLORS[verdicts.FALLBACK], "failing": COLORS[verdicts.FAIL],
                "skipped": COLORS[verdicts.SKIP]}


def label(report: dict[str, Any]) -> str:
    """The column name: the device, and the preferred or excluded providers that make it distinct."""
    options = report.get("options", {})
    extra = [f"prefer {p}" for p in options.get("prefer", [])] + [f"exclude {p}" for p in options.get("exclude", [])]
    return report["device"] + (f" ({', '.join(extra)})" if extra else "")


def op_states(report: dict[str, Any]) -> dict[str, str]:
    """Per op, over levels 1-2 and every dtype: failing if any case is bad, else the coverage state."""
    by_op: dict[str, list[dict[str, Any]]] = {}
    for c in report["cases"]:
        if c["level"] in (1, 2) and c["op"] not in ("device", "numerics"):
            by_op.setdefault(c["op"], []).append(c)
    out = {}
    for op, cases in by_op.items():
        if any(c["verdict"] in verdicts.BAD for c in cases):
            out[op] = "failing"
        else:
            states = {coverage.op_state([c]) for c in cases}
            out[op] = next(s for s in ("not covered", "composite", "native", "skipped") if s in states)
    return out


def page(reports: list[dict[str, Any]]) -> str:
    esc = html.escape
    names = [label(r) for r in reports]
    states = [op_states(r) for r in reports]
    ops = sorted(set().union(*states))
    head = "".join(f"<th>{esc(n)}</th>" for n in names)
    passed = "".join(f"<td>{esc(', '.join(n for n, lv in r['levels'].items() if lv['status'] == 'passed') or '-')}"
                     f"</td>" for r in reports)
    lines = "".join(f"<td>{'<br>'.join(esc(h) for h in coverage.headlines(r))}</td>" for r in reports)
    rows = "".join(f"<tr><th>{esc(op)}</th>" + "".join(
        f'<td style="background:{STATE_COLORS[s[op]]}">{esc(s[op])}</td>' if op in s else "<td></td>" for s in states)
        + "</tr>" for op in ops)
    legend = " ".join(f'<span style="background:{c};padding:2px 6px">{esc(s)}</span>' for s, c in STATE_COLORS.items())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Ember backend scoreboard</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ddd;padding:2px 6px;font-size:12px}}</style></head><body>
<h1>Ember backend scoreboard</h1><p>{legend}. An op is failing when any of its cases failed, crashed or
timed out; not covered when any ran off the device (levels 1 and 2, every dtype).</p>
<table><tr><th></th>{head}</tr><tr><th>levels passed</th>{passed}</tr><tr><th>coverage</th>{lines}</tr>
{rows}</table></body></html>
"""


def write(reports: list[dict[str, Any]], out: Path) -> None:
    out.write_text(page(reports))
