"""The pytest face of the suite: ``pytest --pyargs ember_conformance --ember-device NAME``.

One test per case.  The selected cases run once per session through the same worker pool as
the CLI (so crashes stay isolated), and each test reports its case's verdict: pass and composite
pass; fail, crash and timeout fail with the message and the reproducer; xfail is xfail; skip,
unsupported and fallback are skipped with the reason (a fallback is never a pass).
"""

from __future__ import annotations

from typing import Any

import pytest

from ember_conformance import verdicts


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("ember-conformance")
    group.addoption("--ember-device", default=None, help="device the conformance cases run on (e.g. cpu, vulkan)")
    group.addoption("--ember-level", type=int, default=2, help="run conformance levels 0..N (default 2)")
    group.addoption("--ember-ops", default="", help="comma-separated op name patterns (fnmatch)")
    group.addoption("--ember-dtypes", default="", help="comma-separated dtypes")
    group.addoption("--ember-plugin", action="append", default=[], help="register module:object as a backend")
    group.addoption("--ember-prefer", action="append", default=[], help="preferred provider (repeatable)")
    group.addoption("--ember-jobs", type=int, default=2, help="worker processes")


def _options(config: Any) -> Any:
    from ember_conformance.cases import Options

    split = lambda s: tuple(x for x in s.split(",") if x)  # noqa: E731
    return Options(device=config.getoption("ember_device") or "cpu", max_level=config.getoption("ember_level"),
                   ops=split(config.getoption("ember_ops")), dtypes=split(config.getoption("ember_dtypes")))


def _specs(config: Any) -> list[str]:
    from ember_conformance import plugin_loader

    return [*plugin_loader.specs_from_env(), *config.getoption("ember_plugin")]


def pytest_generate_tests(metafunc: Any) -> None:
    if "ember_case" not in metafunc.fixturenames:
        return
    from ember_conformance import cases, plugin_loader

    plugin_loader.register_all(_specs(metafunc.config))
    ids = cases.case_ids(_options(metafunc.config))
    metafunc.parametrize("ember_case", ids, ids=ids)


@pytest.fixture(scope="session")
def ember_results(request: Any) -> dict[str, verdicts.CaseResult]:
    """Every selected case, run once in worker processes."""
    from ember_conformance import contract
    from ember_conformance.runner import WorkerConfig, run_cases

    config = request.config
    opts = _options(config)
    ids = [item.callspec.params["ember_case"] for item in request.session.items
           if hasattr(item, "callspec") and "ember_case" in item.callspec.params]
    worker = WorkerConfig(device=opts.device, plugins=_specs(config), prefer=config.getoption("ember_prefer"))
    results = run_cases(ids, worker, config.getoption("ember_jobs"), lambda r: None)
    by_id = {r.id: r for r in results}
    claims = contract.claims_hold(results)
    by_id[claims.id] = claims
    return by_id


def check_verdict(result: verdicts.CaseResult) -> None:
    detail = "\n".join(x for x in (result.message, result.reproducer or "") if x)
    if result.verdict in verdicts.BAD:
        pytest.fail(f"{result.verdict}: {detail}", pytrace=False)
    if result.verdict == verdicts.XFAIL:
        pytest.xfail(result.message)
    if result.verdict in (verdicts.SKIP, verdicts.UNSUPPORTED):
        pytest.skip(f"{result.verdict}: {result.message}")
    if result.verdict == verdicts.FALLBACK:
        pytest.skip("ran through the CPU fallback (not counted as a pass)")


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """A conformance session that selected no case fails (zero tests must never read as green)."""
    if session.config.getoption("ember_device") and session.testscollected == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
