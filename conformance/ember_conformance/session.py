"""One conformance run on one device: collect the cases, run them in workers, judge the levels."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ember_conformance import LEVELS, cases, contract, plugin_loader, verdicts
from ember_conformance.progress import Progress
from ember_conformance.runner import WorkerConfig, run_cases


def device_problem(device: str) -> str | None:
    """Why the device cannot run ops (None when it can), without running any kernel."""
    try:
        from ember_core.device import as_device

        as_device(device).backend  # noqa: B018
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def run(opts: cases.Options, config: WorkerConfig, jobs: int, progress: bool = True,
        out: Path | None = None) -> dict[str, Any]:
    """Run and return the report (also written to ``out`` when given)."""
    from ember_conformance import report

    plugin_loader.register_all(config.plugins)
    start = time.monotonic()
    problem = device_problem(opts.device) or ("; ".join(contract.PLUGIN_ERRORS) if contract.PLUGIN_ERRORS else None)
    if problem:  # only the contract can say anything; every other level is skipped with the reason
        ids = cases.case_ids(cases.Options(opts.device, 0, opts.ops, opts.dtypes, opts.demo_epochs))
        skipped = [verdicts.CaseResult(id=f"L{n}/device/-/unusable", level=n, op="device", dtype="-",
                                       sample="unusable", verdict=verdicts.SKIP, message=f"device unusable: {problem}")
                   for n in range(1, opts.max_level + 1)]
    else:
        ids, skipped = cases.case_ids(opts), []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        config.log_dir = out / "workers"
        config.log_dir.mkdir(exist_ok=True)
    bar = Progress(len(ids), opts.device, progress)
    results = run_cases(ids, config, jobs, bar.update) + skipped
    if opts.max_level >= 1 and not problem:
        results.insert(0, contract.claims_hold(results))
    levels = verdicts.judge_levels(results, list(range(opts.max_level + 1)))
    for n, status in levels.items():
        if n > 0 and results and not any(r.level == n for r in results):
            status.status, status.reason = "not run", "no case selected (--ops / --dtypes)"
    for n in range(opts.max_level + 1, max(LEVELS) + 1):
        levels[n] = verdicts.LevelStatus(n, "not run", {}, f"not requested (--level {opts.max_level})",
                                         verdicts.REQUIREMENTS[n])
    options = {**asdict(opts), "jobs": jobs, "prefer": config.prefer, "exclude": config.exclude,
               "plugins": config.plugins, "timeout": config.timeout}
    rep = report.build(opts.device, options, results, levels, time.monotonic() - start)
    if out is not None:
        report.write_all(rep, out)
    return rep
