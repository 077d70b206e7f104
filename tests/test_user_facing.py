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


@pytest.mark.parametrize(("module", "says"), [("sklearn", "scikit-learn"), ("tqdm", "tqdm")])
def test_demo_without_its_extra_says_how_to_install_it(monkeypatch, capsys, module, says):
    import sys

    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # importing it now raises ImportError
    assert main(["demo", "--device", "cpu", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert says in err and 'pip install "ember[demo]"' in err and "Traceback" not in err


@pytest.mark.parametrize(("epochs", "accuracy", "code"), [(None, 0.5, 1), (None, 0.99, 0), (3, 0.5, 0)])
def test_demo_exit_status_holds_only_the_default_run_to_the_target(monkeypatch, epochs, accuracy, code):
    import ember_core.demo as demo

    seen = {}

    def fake_run_demo(device, seed, epochs):
        seen["epochs"] = epochs
        return {"test_accuracy": accuracy, "target_accuracy": demo.TARGET_ACCURACY}

    monkeypatch.setattr(demo, "run_demo", fake_run_demo)
    argv = ["demo"] + ([] if epochs is None else ["--epochs", str(epochs)])
    assert main(argv) == code
    assert seen["epochs"] == (epochs or demo.DEFAULT_EPOCHS)


def test_fallback_warning_names_op_and_dtype_and_points_at_the_users_line(toy):
    import warnings

    import ember_core as em
    from ember_core.dispatch import FallbackWarning

    x = em.ones((3,), dtype=em.float32, device="toy")
    with warnings.catch_warnings(record=True) as caught, em.fallback_policy("warn"):
        warnings.simplefilter("always")
        em.exp(x)  # the toy backend has no exp: it runs on the host
    [warning] = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert "exp (float32) ran on the host" in str(warning.message) and "no float32 kernel" in str(warning.message)
    assert warning.filename == __file__
