"""What a report says first: how much of each level the device runs itself, per dtype, which
provider ran which ops, and the facts a reader needs to trust the numbers (device, driver, plugin
versions, the settings that change numerics)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from ember_conformance import verdicts


def op_state(cases: list[dict[str, Any]]) -> str:
    """native | composite | not covered | skipped, for the cases of one (level, op, dtype)."""
    seen = {c["verdict"] for c in cases}
    if seen & verdicts.NOT_COVERED:
        return "not covered"
    if seen <= {verdicts.SKIP}:
        return "skipped"
    return "composite" if verdicts.COMPOSITE in seen or cases[0].get("how") == "composite" else "native"


def by_level_and_dtype(cases: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{level: {dtype: {native, composite, not covered, skipped, ops, not_covered_ops}}} for levels 1-2,
    counted by op: an op is not covered when any of its cases ran off the device."""
    groups: dict[tuple[int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in cases:
        if c["level"] in (1, 2) and c["op"] not in ("device", "numerics"):
            groups[(c["level"], c["dtype"], c["op"])].append(c)
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (level, dtype, op), mine in sorted(groups.items()):
        cell = out[str(level)].setdefault(dtype, {"native": 0, "composite": 0, "not covered": 0, "skipped": 0,
                                                  "failing": 0, "ops": 0, "not_covered_ops": []})
        state = op_state(mine)
        cell[state] += 1
        cell["ops"] += 1
        cell["failing"] += any(c["verdict"] in verdicts.BAD for c in mine)
        if state == "not covered":
            cell["not_covered_ops"].append(op)
    return dict(out)


def headline(cell: dict[str, Any]) -> str:
    extra = "".join(f", {k} {cell[k]}" for k in ("skipped", "failing") if cell.get(k))
    return (f"native {cell['native']} of {cell['ops']} ops (composite {cell['composite']}, "
            f"not covered {cell['not covered']}{extra})")


def headlines(report: dict[str, Any]) -> list[str]:
    """One line per level and dtype: "level 1 float32: native 80 of 146 ops (composite 40, not covered 26)"."""
    table = report.get("coverage") or by_level_and_dtype(report["cases"])
    return [f"level {level} {dtype}: {headline(cell)}" for level, dtypes in sorted(table.items())
            for dtype, cell in dtypes.items()]


NO_KERNEL = re.compile(r"UnsupportedOpError: (\S+) has no kernel")


def not_covered_ranked(cases: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """The ops the device did not run, most needed first: how many cases (samples, gradients, the
    demo) ran each on the host or stopped at it under the fallback policy 'error'."""
    needed: Counter[str] = Counter()
    for c in cases:
        ops = set(c.get("extra", {}).get("fell_back", ()))
        if c["verdict"] in verdicts.NOT_COVERED and c.get("how") in ("fallback", "unsupported", "native"):
            ops.add(c["op"])
        ops.update(NO_KERNEL.findall(c.get("message", "")))
        needed.update(ops)
    return needed.most_common()


def by_provider(cases: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Which provider ran which ops natively (levels 1-2): the attribution when several serve a device."""
    out: dict[str, set[str]] = defaultdict(set)
    for c in cases:
        ran = c["verdict"] not in verdicts.NOT_COVERED and c["verdict"] != verdicts.SKIP
        if c["level"] in (1, 2) and c.get("how") == "native" and c.get("provider") and ran:
            out[c["provider"]].add(c["op"])
    return {p: sorted(ops) for p, ops in sorted(out.items())}


def facts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows: device, driver, plugins, ember, and the settings that change numerics."""
    env = report["environment"]
    props = env.get("device_properties", {})
    options = report.get("options", {})
    device_type = report["device"].split(":")[0]
    serving = [p for p in env.get("plugins", [])
               if device_type in p["device_types"] or p["name"] in report.get("providers", {})]
    plugins = ", ".join(f"{p['package']} {p['version']}" for p in serving)
    from ember_core.plugins import numerics_properties

    numerics = numerics_properties(props)
    numerics.update(env.get("ember_environment", {}))
    rows = [
        ("device", f"{report['device']}: {props.get('name', props.get('error', '?'))}"),
        ("driver", " ".join(str(props[k]) for k in ("driver", "driver_version", "api_version") if props.get(k))
         or "not reported"),
        ("plugins", plugins or "none"),
        ("ember", f"ember {env['ember']}, suite {env['suite']}, ABI {env['abi']}, Python {env['python']}"),
        ("numerics settings", ", ".join(f"{k}={v}" for k, v in numerics.items()) or "defaults (none reported)"),
        ("providers preferred", ", ".join(options.get("prefer", [])) or "default order"),
    ]
    if options.get("exclude"):
        rows.append(("providers excluded", ", ".join(options["exclude"])))
    return rows
