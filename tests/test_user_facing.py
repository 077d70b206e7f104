"""What a user meets first: `ember --version`, the demo's progress and its accuracy gate, and
warnings that point at the user's line."""

from __future__ import annotations

import pytest

from ember_core.cli import main


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"ember {version('ember')}"
