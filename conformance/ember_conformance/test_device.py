"""Collected by ``pytest --pyargs ember_conformance --ember-device NAME``: one test per case."""

from __future__ import annotations

from typing import Any

from ember_conformance.pytest_plugin import check_verdict


def test_case(ember_case: str, ember_results: dict[str, Any]) -> None:
    check_verdict(ember_results[ember_case])


def test_manifest_claims_hold(ember_results: dict[str, Any]) -> None:
    check_verdict(ember_results["L0/manifest-claims/-/check"])
