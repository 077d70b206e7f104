"""The run's artifacts: ``report.json`` (versioned schema, see README.md), ``report.html`` (a static
page) and ``summary.md``; plus the environment fingerprint that makes two reports comparable."""

from __future__ import annotations

import datetime
import html
import importlib.metadata
import json
import os
import platform
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from ember_conformance import LEVELS, REPORT_SCHEMA_VERSION, __version__, coverage, precision, verdicts

COLORS = {
    verdicts.PASS: "#2e7d32", verdicts.COMPOSITE: "#66bb6a", verdicts.FALLBACK: "#f9a825",
    verdicts.XFAIL: "#8d6e63", verdicts.SKIP: "#bdbdbd", verdicts.UNSUPPORTED: "#9e9e9e",
    verdicts.FAIL: "#c62828", verdicts.CRASH: "#6a1b9a", verdicts.TIMEOUT: "#ad1457",
}


def environment(device: str) -> dict[str, Any]:
    """Versions of everything that decides a verdict: ember, plugins, this suite, the ABI, the device
    and its driver, Python and every installed distribution."""
    import ember_core
    from ember_core.plugins import ABI_MAJOR, ABI_MINOR, MANAGER

    MANAGER.ensure_discovered()
    env: dict[str, Any] = {
        "ember": ember_core.__version__, "suite": __version__, "abi": f"{ABI_MAJOR}.{ABI_MINOR}",
        "python": sys.version.split()[0], "implementation": platform.python_implementation(),
        "platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
        "ember_environment": {k: v for k, v in os.environ.items() if k.startswith("EMBER_")},
        "plugins": [{"name": b.name, "package": b.package, "version": b.info.version,
                     "abi": "{}.{}".format(*b.info.abi), "priority": b.priority,
                     "device_types": list(b.info.device_types)} for b in MANAGER.backends.values()],
        "broken_plugins": [{"name": b.name, "package": b.package, "reason": b.reason} for b in MANAGER.broken.values()],
        "packages": sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                           if d.metadata["Name"]),
    }
    try:
        from ember_core.device import as_device

        d = as_device(device)
        props = dict(d.backend.hooks["ember_device_properties"](d))
        env["device_properties"] = {k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
                                    for k, v in props.items()}
        env["driver"] = props.get("driver")
    except Exception as exc:  # an unusable device is reported by level 0; the report still gets written
        env["device_properties"] = {"error": f"{type(exc).__name__}: {exc}"}
    return env


def providers_matrix(results: list[verdicts.CaseResult]) -> dict[str, dict[str, Any]]:
    """Per "op:dtype": the worst verdict, how it ran, which provider served it, and verdict counts."""
    cells: dict[str, list[verdicts.CaseResult]] = defaultdict(list)
    for r in results:
        if r.level in (1, 2):
            cells[f"{r.op}:{r.dtype}"].append(r)
    return {key: {"verdict": verdicts.worst([r.verdict for r in rs]), "how": rs[0].how, "provider": rs[0].provider,
                  "counts": dict(Counter(r.verdict for r in rs))} for key, rs in cells.items()}


def build(device: str, options: dict[str, Any], results: list[verdicts.CaseResult],
          levels: dict[int, verdicts.LevelStatus], seconds: float) -> dict[str, Any]:
    cases = [r.to_json() for r in results]
    return {
        "schema": "ember-conformance-report", "schema_version": REPORT_SCHEMA_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device, "options": options, "seconds": round(seconds, 2),
        "environment": environment(device),
        "levels": {str(n): {"name": LEVELS[n], "status": s.status, "counts": s.counts, "reason": s.reason,
                            "requirement": s.requirement} for n, s in levels.items()},
        "summary": dict(Counter(r.verdict for r in results)),
        "matrix": providers_matrix(results),
        "coverage": coverage.by_level_and_dtype(cases),
        "providers": coverage.by_provider(cases),
        "not_covered": dict(coverage.not_covered_ranked(cases)),
        "precision": precision.table(cases, device),
        "cases": cases,
    }


def passed_levels(report: dict[str, Any]) -> str:
    """"cpu: passed levels 0, 1, 2; level 3 skipped (...)" — the line the run ends with."""
    levels = report["levels"]
    passed = [n for n, lv in levels.items() if lv["status"] == "passed"]
    parts = [f"passed levels {', '.join(passed)}" if passed else "passed no level"]
    parts += [f"level {n} {lv['status']}" + (f" ({lv['reason']})" if lv["reason"] else "")
              for n, lv in levels.items() if lv["status"] != "passed"]
    return f"{report['device']}: " + "; ".join(parts)


def write_json(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")


def _bad(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report["cases"] if c["verdict"] in verdicts.BAD]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{v} {c}" for v, c in sorted(counts.items(), key=lambda x: verdicts.SEVERITY[x[0]]))


def tolerance_text(tolerance: dict[str, float] | None) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in (tolerance or {}).items())


def precision_rows(report: dict[str, Any], limit: int, row: str) -> list[str]:
    """The precision table's header and its worst ``limit`` rows, each formatted by ``row``."""
    numerics = [f"{c['dtype']}: {c['verdict']}" + (f" ({c['message']})" if c.get("message") else "")
                for c in report["cases"] if c["op"] == "numerics"]
    head = [row.format("op:dtype", "ulp", "relative", "absolute", "cases", "declared deviation")]
    if row.startswith("|"):
        head.append("|---" * 6 + "|")
    body = [row.format(key, f"{r['max_ulp']:.3g}", f"{r['max_rel']:.3g}", f"{r['max_abs']:.3g}", r["cases"],
                       ", ".join(f"{k} {v}" for k, v in r.get("declared", {}).items()) or "-")
            for key, r in list(report.get("precision", {}).items())[:limit]]
    return [f"Special values and flush-to-zero: {'; '.join(numerics) or 'not run'}", "", *head, *body]


def markdown(report: dict[str, Any], limit: int = 60) -> str:
    lines = [f"# Ember conformance: `{report['device']}`", "", *[f"- {h}" for h in coverage.headlines(report)],
             "", passed_levels(report), "", "| | |", "|---|---|",
             *[f"| {k} | {v} |" for k, v in coverage.facts(report)],
             f"| run | {len(report['cases'])} cases in {report['seconds']} s |", "",
             "| level | what | requirement | status | verdicts |", "|---|---|---|---|---|"]
    for n, lv in report["levels"].items():
        status = lv["status"] + (f": {lv['reason']}" if lv["reason"] else "")
        lines.append(f"| {n} | {lv['name']} | {lv.get('requirement', '')} | {status} | {_counts(lv['counts'])} |")
    lines += ["", "## Precision (worst error against the float64 reference, on the device)", "",
              *precision_rows(report, limit, "| {} | {} | {} | {} | {} | {} |"), ""]
    lines += ["", "## Ops not covered on the device, most needed first", "",
              ", ".join(f"{op} ({n})" for op, n in report.get("not_covered", {}).items()) or "none"]
    lines += ["", "## Ops each provider ran natively", ""]
    lines += [f"- {p} ({len(ops)}): {', '.join(ops)}" for p, ops in report.get("providers", {}).items()] or ["- none"]
    bad = _bad(report)
    lines += ["", f"## Failures ({len(bad)})", ""]
    for c in bad[:limit]:
        lines.append(f"- `{c['id']}` **{c['verdict']}**: {c.get('message', '')[:300]}")
    if len(bad) > limit:
        lines.append(f"- ... and {len(bad) - limit} more (report.json has them all)")
    lines += ["", passed_levels(report), ""]
    return "\n".join(lines)


def _matrix_html(report: dict[str, Any]) -> str:
    matrix = report["matrix"]
    ops = sorted({k.split(":")[0] for k in matrix})
    dtypes = [d for d in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32",
                          "float64", "complex64", "complex128") if any(k.endswith(":" + d) for k in matrix)]
    rows = ["<tr><th>op</th>" + "".join(f"<th>{d}</th>" for d in dtypes) + "</tr>"]
    for op in ops:
        cells = []
        for d in dtypes:
            cell = matrix.get(f"{op}:{d}")
            if cell is None:
                cells.append("<td></td>")
                continue
            title = html.escape(f"{cell['how']} via {cell['provider'] or '-'}: {cell['counts']}")
            label = html.escape(cell["provider"] or cell["how"] or "")
            cells.append(f'<td style="background:{COLORS[cell["verdict"]]}" title="{title}">{label}</td>')
        rows.append(f"<tr><th>{html.escape(op)}</th>{''.join(cells)}</tr>")
    return "<table class=m>" + "\n".join(rows) + "</table>"


def precision_html(report: dict[str, Any], limit: int) -> str:
    rows = precision_rows(report, limit, "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>")
    return f"<p>{html.escape(rows[0])}</p><table>{''.join(rows[2:])}</table>"


def html_page(report: dict[str, Any], limit: int = 300) -> str:
    esc = html.escape
    levels = "".join(
        f"<tr><td>{n}</td><td>{esc(lv['name'])}</td><td>{esc(lv.get('requirement', ''))}</td>"
        f"<td>{esc(lv['status'])}</td><td>{esc(lv['reason'])}</td><td>{esc(_counts(lv['counts']))}</td></tr>"
        for n, lv in report["levels"].items())
    heads = "".join(f"<li>{esc(h)}</li>" for h in coverage.headlines(report))
    not_covered = ", ".join(f"{op} ({n})" for op, n in report.get("not_covered", {}).items()) or "none"
    facts = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in coverage.facts(report))
    providers = "".join(f"<li><b>{esc(p)}</b> ({len(ops)}): {esc(', '.join(ops))}</li>"
                        for p, ops in report.get("providers", {}).items()) or "<li>none</li>"
    skipped = "".join(f"<li><code>{esc(c['id'])}</code> {c['verdict']}: {esc(c.get('message', ''))}</li>"
                      for c in report["cases"] if c["verdict"] in (verdicts.SKIP, verdicts.XFAIL))
    legend = " ".join(f'<span style="background:{c};padding:2px 6px;color:#fff">{v}</span>' for v, c in COLORS.items())
    failures = []
    for c in _bad(report)[:limit]:
        stats = ", ".join(f"{k} {c[k]:.3g}" for k in ("max_abs_error", "max_rel_error", "max_ulp")
                          if c.get(k) is not None)
        failures.append(f"<details><summary><code>{esc(c['id'])}</code> <b>{c['verdict']}</b> {esc(stats)} "
                        f"{esc(tolerance_text(c.get('tolerance')))}</summary><pre>{esc(c.get('message', ''))}</pre>"
                        f"<pre>{esc(c.get('reproducer', ''))}</pre></details>")
    env = report["environment"]
    title = f"Ember conformance: {esc(report['device'])}"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em}} table.m td{{min-width:3em;font-size:11px;color:#fff}}
table{{border-collapse:collapse}} td,th{{border:1px solid #ddd;padding:2px 6px}} pre{{background:#f5f5f5;padding:8px;
overflow:auto}}</style></head><body>
<h1>Ember conformance: {esc(report['device'])}</h1>
<ul>{heads}</ul>
<p>{esc(passed_levels(report))}</p>
<table>{facts}<tr><th>run</th><td>{esc(env['platform'])}; {len(report['cases'])} cases in {report['seconds']} s;
created {esc(report['created'])}</td></tr></table>
<h2>Levels</h2><table><tr><th>level</th><th>what</th><th>requirement</th><th>status</th><th>reason</th><th>verdicts</th>
</tr>{levels}</table>
<h2>Ops not covered on the device, most needed first</h2><p>{esc(not_covered)}</p>
<h2>Ops each provider ran natively</h2><ul>{providers}</ul>
<h2>Precision (worst error against the float64 reference, on the device)</h2>{precision_html(report, limit)}
<h2>Ops x dtypes</h2><p>{legend}. Each cell names the provider that served it (or how it ran); hover for counts.</p>
{_matrix_html(report)}
<h2>Failures</h2>{''.join(failures) or '<p>none</p>'}
<h2>Skipped and expected failures</h2><ul>{skipped or '<li>none</li>'}</ul>
</body></html>
"""


def write_all(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_json(report, out / "report.json")
    (out / "summary.md").write_text(markdown(report))
    (out / "report.html").write_text(html_page(report))
