"""``ember-conformance run | diff | baseline | scoreboard | list``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ember_conformance import cases, contract, diff, plugin_loader, report, session
from ember_conformance.runner import WorkerConfig


def _devices(names: list[str]) -> list[str]:
    """``all`` expands to every device type an installed plugin owns and can use now."""
    if names != ["all"]:
        return names
    from ember_core.plugins import MANAGER

    MANAGER.ensure_discovered()
    return [t for t, b in sorted(MANAGER.device_owner.items()) if b.hooks["ember_device_count"](device_type=t) > 0]


UNAVAILABLE = 3  # the exit status of a run whose device type exists but has no usable device here


def device_problem(name: str) -> tuple[int, str] | None:
    """(exit status, message) when NAME cannot be tested: 2 for an unknown device type (a usage
    error that lists the devices there are), UNAVAILABLE for a known type without a usable device."""
    from ember_core.plugins import MANAGER

    MANAGER.ensure_discovered()
    device_type = name.split(":")[0]
    owner = MANAGER.device_owner.get(device_type)
    if owner is None:
        if any(device_type in (b.name, *b.device_types) for b in MANAGER.broken.values()):
            return None  # a broken plugin's device: the run reports it (level 0, discovery)
        known = ", ".join(sorted(MANAGER.device_owner)) or "none"
        return 2, f"unknown device {name!r}; the devices that exist here: {known} (see `ember backends`)"
    if owner.hooks["ember_device_count"](device_type=device_type) < 1:
        reason = owner.hooks["ember_device_unavailable_reason"](device_type=device_type) or "no device found"
        return UNAVAILABLE, f"{name}: unavailable: {reason}"
    return None


def _run(args: argparse.Namespace) -> int:
    specs = [*plugin_loader.specs_from_env(), *args.plugin]
    plugin_loader.register_all(specs)
    devices = _devices(args.device)
    if not devices:
        print("ember-conformance: no device to test (no installed backend has a usable device)", file=sys.stderr)
        return 2
    problems = [p for p in map(device_problem, devices) if p is not None]
    if problems and not contract.PLUGIN_ERRORS:  # a --plugin that failed to register gets its report
        print("\n".join(f"ember-conformance: {message}" for _, message in problems), file=sys.stderr)
        return min(code for code, _ in problems)  # a usage error (2) first
    if args.ops:
        left_out = cases.levels_left_out(args.ops, args.level)
        if left_out:
            print(f"ember-conformance: --ops leaves out {left_out}", file=sys.stderr)
    reports = []
    for device in devices:
        opts = cases.Options(device=device, max_level=args.level, ops=tuple(args.ops), dtypes=tuple(args.dtypes),
                             demo_epochs=args.demo_epochs)
        config = WorkerConfig(device=device, plugins=specs, prefer=args.prefer, exclude=args.exclude,
                              demo_epochs=args.demo_epochs, timeout=args.timeout)
        out = Path(args.out) if len(devices) == 1 else Path(args.out) / device.replace(":", "-")
        rep = session.run(opts, config, args.jobs, progress=not args.no_progress, out=out)
        reports.append(rep)
        print(report.markdown(rep, limit=20))
        print(f"report: {out / 'report.html'}")
    print("\n".join(report.passed_levels(r) for r in reports))
    empty = [r["device"] for r in reports if not r["cases"]]
    if empty:
        print(f"ember-conformance: no case was collected for {', '.join(empty)}: that is a failure", file=sys.stderr)
        return 2
    failed = any(lv["status"] == "failed" for r in reports for lv in r["levels"].values())
    return 1 if failed else 0


def _diff(args: argparse.Namespace) -> int:
    try:
        old, new = diff.load(args.old), diff.load(args.new)
    except diff.ReportError as exc:
        print(f"ember-conformance diff: {exc}", file=sys.stderr)
        return 2
    changes = diff.compare(old, new)
    print(diff.render(changes))
    return 1 if changes["regressions"] else 0


def _baseline(args: argparse.Namespace) -> int:
    try:
        diff.write_baseline(diff.load(args.report), Path(args.out))
    except diff.ReportError as exc:
        print(f"ember-conformance baseline: {exc}", file=sys.stderr)
        return 2
    return 0


def _scoreboard(args: argparse.Namespace) -> int:
    from ember_conformance import scoreboard

    try:
        reports = [diff.load(path) for path in args.reports]
    except diff.ReportError as exc:
        print(f"ember-conformance scoreboard: {exc}", file=sys.stderr)
        return 2
    scoreboard.write(reports, Path(args.out))
    print(f"scoreboard: {args.out}")
    return 0


def _list(args: argparse.Namespace) -> int:
    plugin_loader.register_all([*plugin_loader.specs_from_env(), *args.plugin])
    ids = cases.case_ids(cases.Options(args.device[0], args.level, tuple(args.ops), tuple(args.dtypes)))
    print("\n".join(ids))
    print(f"{len(ids)} cases", file=sys.stderr)
    return 0 if ids else 2


def _selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", action="append", required=True,
                   help="device to test (repeatable; 'all' = every usable device)")
    p.add_argument("--level", type=int, default=4, choices=range(5),
                   help="run levels 0..N (default 4): 0 contract, 1 ops in float32, 2 other dtypes, 3 autograd, 4 demo")
    p.add_argument("--ops", type=lambda s: [x for x in s.split(",") if x], default=[],
                   help="comma-separated op name patterns (fnmatch), e.g. 'add,log*,views'")
    p.add_argument("--dtypes", nargs="+", default=[], help="only these dtypes")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE:OBJECT",
                   help="register a backend that is not installed (module:object or path/file.py:object)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ember-conformance", description="Ember's backend conformance suite.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the suite against a device and write the report")
    _selection(run)
    run.add_argument("--out", required=True, help="directory for report.json, report.html, summary.md")
    run.add_argument("--prefer", action="append", default=[], metavar="PROVIDER",
                     help="prefer this provider (repeatable, in order), as ember_core.providers(prefer=...)")
    run.add_argument("--exclude", action="append", default=[], metavar="PROVIDER",
                     help="never use this provider (repeatable), as ember_core.providers(exclude=...)")
    run.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes (default 2)")
    run.add_argument("--timeout", type=float, default=60.0, help="seconds one case may take (default 60)")
    run.add_argument("--demo-epochs", type=int, default=10, help="epochs of the level-4 demo (default 10)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    d = sub.add_parser("diff", help="regressions and fixes between two report.json files")
    d.add_argument("old")
    d.add_argument("new")
    b = sub.add_parser("baseline", help="write the part of a report.json that diff compares (to commit)")
    b.add_argument("report")
    b.add_argument("out")
    sb = sub.add_parser("scoreboard", help="one static HTML page, op by backend, from several report.json files")
    sb.add_argument("reports", nargs="+")
    sb.add_argument("--out", default="scoreboard.html", help="the page to write (default scoreboard.html)")
    lst = sub.add_parser("list", help="print the case ids a run would collect")
    _selection(lst)
    args = parser.parse_args(argv)
    return {"run": _run, "diff": _diff, "baseline": _baseline, "scoreboard": _scoreboard,
            "list": _list}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
