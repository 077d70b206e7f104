"""Every setting is checked where it is read: EMBER_PROVIDERS, EMBER_FALLBACK, EMBER_CONFIG and
ember.toml's [dispatch] table, the providers() / fallback_policy() arguments, set_default_device.
A bad one raises ConfigError (a ValueError) naming its source; the CLI says it once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ember_core as em
from ember_core import dispatch
from ember_core.plugins import MANAGER, BrokenPlugin

_VARIABLES = ("EMBER_PROVIDERS", "EMBER_FALLBACK", "EMBER_CONFIG")


@pytest.fixture
def read_config(monkeypatch, tmp_path):
    """``read_config(toml=None, **environment)``: the preferences those settings give (or the
    error); the process's own configuration comes back afterwards."""
    for variable in _VARIABLES:
        monkeypatch.delenv(variable, raising=False)

    def read(toml=None, **environment):
        if toml is not None:
            path = tmp_path / "ember.toml"
            path.write_text(toml)
            monkeypatch.setenv("EMBER_CONFIG", str(path))
        for variable, value in environment.items():
            monkeypatch.setenv(variable, value)
        dispatch._clear()
        return dispatch.current()

    yield read
    monkeypatch.undo()
    dispatch._clear()


def test_a_misspelled_provider_is_refused_with_the_known_names(read_config):
    with pytest.raises(em.ConfigError, match=r"EMBER_PROVIDERS='xnnpak': no plugin is named 'xnnpak'; "
                                             r"the names are cpu, .*xnnpack"):
        read_config(EMBER_PROVIDERS="xnnpak")
    with pytest.raises(em.ConfigError, match="xnnpak"):
        em.ones(2) + 1  # the first op reads the configuration: the error, not a silent default
    with pytest.raises(em.ConfigError, match="no plugin is named 'vulkn'"):
        read_config(EMBER_PROVIDERS="cpu,-vulkn")


def test_provider_names_valid_everywhere_are_accepted(read_config, monkeypatch):
    """ember's own plugin names, installed or not, and a broken plugin's name (excluding it is
    harmless), so one setting serves every machine."""
    monkeypatch.setitem(MANAGER.broken, "flaky", BrokenPlugin("flaky", "acme-flaky", "import failed"))
    prefs = read_config(EMBER_PROVIDERS="cuda,cpu,-flaky,-rocm")
    assert prefs.prefer == ("cuda", "cpu") and prefs.exclude == {"flaky", "rocm"}
    with pytest.raises(em.ConfigError, match="empty entry"):
        read_config(EMBER_PROVIDERS="cpu,,xnnpack")


@pytest.mark.parametrize(("toml", "message"), [
    ('[dispatch]\nprefer = "xnnpack"\n', r"\[dispatch\] prefer must be a list of plugin names.*got 'xnnpack'"),
    ('[dispatch]\nexclude = "vulkan"\n', r"\[dispatch\] exclude must be a list"),
    ('[dispatch]\nprefer = ["xnnpak"]\n', r"\[dispatch\] prefer: no plugin is named 'xnnpak'"),
    ('[dispatch]\nprefer = [1]\n', r"provider names are plugin names \(non-empty strings\), got \[1\]"),
    ('[dispatch]\nfallback = "sometimes"\n', r"\[dispatch\] fallback: 'sometimes' is not a fallback policy; "
                                             r"use one of error, warn, allow"),
    ('[dispatch]\nfallback = 1\n', "1 is not a fallback policy"),
    ('[dispatch]\nprefered = ["cpu"]\n', r"unknown keys \['prefered'\]; the keys are prefer, exclude, fallback"),
    ('dispatch = 3\n', "'dispatch' must be a table"),
    ('[dispatch\n', "cannot read it as TOML"),
], ids=["prefer-string", "exclude-string", "prefer-typo", "prefer-number", "policy", "policy-number",
        "unknown-key", "not-a-table", "not-toml"])
def test_ember_toml_values_are_checked(read_config, toml, message):
    with pytest.raises(em.ConfigError, match=message):
        read_config(toml)


def test_ember_toml_as_documented_works(read_config):
    prefs = read_config('[dispatch]\nprefer = ["xnnpack", "cpu"]\nexclude = ["vulkan"]\nfallback = "error"\n')
    assert (prefs.prefer, prefs.exclude, prefs.fallback) == (("xnnpack", "cpu"), {"vulkan"}, "error")
    prefs = read_config('[dispatch]\nexclude = ["rocm"]\n', EMBER_PROVIDERS="cpu,-vulkan", EMBER_FALLBACK="allow")
    assert (prefs.prefer, prefs.exclude, prefs.fallback) == (("cpu",), {"rocm", "vulkan"}, "allow")


def test_a_bad_fallback_variable_and_a_missing_config_file_are_named(read_config, tmp_path):
    with pytest.raises(em.ConfigError, match="EMBER_FALLBACK: 'sometimes' is not a fallback policy"):
        read_config(EMBER_FALLBACK="sometimes")
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(em.ConfigError, match=f"EMBER_CONFIG='{missing}': no such file"):
        read_config(EMBER_CONFIG=str(missing))


def test_context_manager_arguments_are_checked():
    with pytest.raises(em.ConfigError, match=r"providers\(prefer=...\): no plugin is named 'xnnpak'"):
        em.providers(prefer="xnnpak").__enter__()
    with pytest.raises(em.ConfigError, match=r"providers\(exclude=...\) takes a plugin name or an iterable"):
        em.providers(exclude=3).__enter__()
    with pytest.raises(em.ConfigError, match=r"fallback_policy\(\): 'sometimes' is not a fallback policy"):
        em.fallback_policy("sometimes").__enter__()
    with em.providers(prefer="cpu", exclude=("cuda",)):
        assert dispatch.current().prefer == ("cpu",)


@pytest.mark.parametrize(("name", "error", "message"), [
    ("nope", em.BackendUnavailableError, r"device type 'nope'.*has no backend of that name"),
    ("cpu:3", em.BackendUnavailableError, "device cpu:3 is not available"),
    ("cpu:x", em.DeviceError, "is not a device name"),
])
def test_set_default_device_refuses_an_unusable_device_at_once(name, error, message):
    with pytest.raises(error, match=message):
        em.set_default_device(name)
    assert em.default_device() == "cpu"


@pytest.mark.parametrize("command", ["backends", "doctor"])
def test_the_cli_reports_a_bad_setting_once(command):
    env = {**os.environ, "EMBER_FALLBACK": "sometimes"}
    out = subprocess.run([sys.executable, "-m", "ember_core.cli", command], capture_output=True, text=True, env=env)
    assert out.returncode == 2
    assert out.stderr == ("ember: configuration error: EMBER_FALLBACK: 'sometimes' is not a fallback policy; "
                          "use one of error, warn, allow\n")
    assert "FAIL" not in out.stdout
