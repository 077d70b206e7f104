"""The README's two set-up commands are what CI runs: the test command verbatim in .ci/run, and the
main job is `ember demo`; the test command installs every distribution of the repository."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set-up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    commands = _setup_commands()
    assert len(commands) == 2
    main_job, tests = commands
    assert main_job.rstrip().endswith("ember demo")
    assert "pytest" in tests
    assert tests.strip() in (ROOT / ".ci" / "run").read_text()


def test_the_test_command_installs_every_distribution_of_the_repository():
    tests = _setup_commands()[1]
    installed = set(re.findall(r"-e (\S+)", tests))
    distributions = {f"./{p.parent.relative_to(ROOT)}" for p in ROOT.glob("*/*/pyproject.toml")}
    distributions |= {f"./{p.parent.relative_to(ROOT)}" for p in ROOT.glob("*/pyproject.toml")}
    assert {'".[test]"', *distributions} == installed
