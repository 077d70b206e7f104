"""The docs' examples run: every ```python block of docs/*.md is executed (the blocks of one page
in order, sharing one namespace, as a reader would paste them), and every ```toml block parses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

DOCS = sorted((Path(__file__).resolve().parent.parent / "docs").glob("*.md"))


def _blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for number, block in enumerate(_blocks(page, "python"), 1):
        exec(compile(block, f"{page.name}, python block {number}", "exec"), namespace)


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_toml_blocks_parse(page):
    for block in _blocks(page, "toml"):
        tomllib.loads(block)


def test_the_backend_guide_has_examples_of_both_kinds():
    guide = next(p for p in DOCS if p.name == "writing-a-backend.md")
    assert len(_blocks(guide, "python")) >= 4 and len(_blocks(guide, "toml")) >= 2
