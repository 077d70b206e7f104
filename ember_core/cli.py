"""The ``ember`` command: ``ember backends``, ``ember doctor`` (and ``ember demo`` with nn)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

DOCTOR_TIMEOUT = 120.0  # seconds one device's check may take in its process


def _backends(args: argparse.Namespace) -> int:
    from ember_core import dispatch
    from ember_core.plugins import MANAGER

    MANAGER.ensure_discovered()
    rows = []
    for backend in MANAGER.backends.values():
        devices = []
        for device_type in backend.info.device_types:
            count = backend.hooks["ember_device_count"](device_type=device_type)
            reason = backend.hooks["ember_device_unavailable_reason"](device_type=device_type)
            devices.append(f"{device_type} x{count}" + (f" ({reason})" if reason else ""))
        serves = ", ".join(f"{dt}: {len(ops)} ops" for dt, ops in backend.manifest.kernels.items()) or "-"
        rows.append((backend.name, backend.package, backend.info.version, "{}.{}".format(*backend.info.abi),
                     ", ".join(devices) or "-", serves, f"ok (priority {backend.priority})"))
    for broken in MANAGER.broken.values():
        rows.append((broken.name, broken.package or "-", "-", "-", "-", "-", f"BROKEN: {broken.reason}"))
    header = ("plugin", "package", "version", "abi", "devices", "kernels", "status")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + str(row[-1]))
    if not rows:
        print('no backends installed; try: pip install "ember[cpu]"')
    prefs = dispatch.current()
    print(f"\nprovider preference: {list(prefs.prefer) or 'by priority'}; excluded: "
          f"{sorted(prefs.exclude) or 'none'}; fallback policy: {prefs.fallback}")
    for device_type in sorted(MANAGER.device_owner):
        ranked = dispatch.ranked_providers(device_type, prefs)
        order = ", ".join(f"{b.name} ({len(b.manifest.kernels[device_type])} ops)" for b in ranked) or "none"
        print(f"{device_type} tensors run on, in order: {order}, then composites, then the fallback")
    return 1 if MANAGER.broken or not MANAGER.backends else 0  # an unavailable device is not broken


def _doctor_device(device: Any) -> None:
    """A small computation whose result is known exactly; raises on any discrepancy."""
    import ember_core as em

    a = em.arange(12, dtype=em.float32, device=device).reshape((3, 4))
    b = em.ones((4, 2), dtype=em.float32, device=device)
    got = (a @ b).sum().item()
    if got != 132.0:
        raise AssertionError(f"matmul/sum gave {got}, expected 132.0")
    c = (a * 2 + 1).max().item()
    if c != 23.0:
        raise AssertionError(f"elementwise/max gave {c}, expected 23.0")
    device.backend.hooks["ember_synchronize"](device)


def numerics_settings(props: Mapping[str, Any]) -> list[str]:
    """The properties that change a device's numerics as "key = value" lines (a mapping's entries as "key.entry")."""
    def flat(key: str, value: Any) -> Iterator[str]:
        if isinstance(value, Mapping):
            for k, v in value.items():
                yield from flat(f"{key}.{k}", v)
        else:
            yield f"{key} = {value}"

    from ember_core.plugins import numerics_properties

    return [line for key, value in numerics_properties(props).items() for line in flat(key, value)]


def doctor_one(name: str, verbose: bool) -> int:
    """The child process of ``ember doctor``: one device's check, its failure on stdout, then the device's
    numerics settings (indented lines)."""
    from ember_core.device import as_device

    status = 0
    try:
        _doctor_device(as_device(name))
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}")
        if verbose:
            traceback.print_exc()
        status = 1
    try:
        device = as_device(name)
        settings = numerics_settings(device.backend.hooks["ember_device_properties"](device))
    except Exception as exc:
        settings = [f"properties unavailable: {type(exc).__name__}: {exc}"]
    for line in settings:
        print(f"{' ' * 6}{line}")
    return status


def _check_in_subprocess(device: Any, verbose: bool) -> tuple[str | None, str]:
    """Why the device failed its check (None: passed) and its numerics settings, run in a fresh process so
    that a kernel that segfaults or hangs fails its own device and every other device is still checked."""
    code = "import sys; from ember_core.cli import doctor_one; sys.exit(doctor_one(sys.argv[1], sys.argv[2] == '1'))"
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(device), "1" if verbose else "0"],
                              stdout=subprocess.PIPE, stderr=None if verbose else subprocess.DEVNULL, text=True,
                              timeout=DOCTOR_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"hung (no answer within {DOCTOR_TIMEOUT:g} s)", ""
    settings = "".join(line + "\n" for line in proc.stdout.splitlines() if line.startswith(" "))
    if proc.returncode < 0:
        return f"crashed (signal {-proc.returncode})", settings
    if proc.returncode != 0:
        said = [line for line in proc.stdout.splitlines() if line.strip() and not line.startswith(" ")]
        return "\n".join(said) or f"its check exited with status {proc.returncode}", settings
    return None, settings


def _doctor(args: argparse.Namespace) -> int:
    from ember_core import dispatch
    from ember_core.device import Device
    from ember_core.plugins import MANAGER

    MANAGER.ensure_discovered()
    dispatch.current()  # a bad setting fails every op: say so once (main), rather than FAIL per device
    failures = 0
    for device_type, backend in sorted(MANAGER.device_owner.items()):
        count = backend.hooks["ember_device_count"](device_type=device_type)
        if count == 0:
            reason = backend.hooks["ember_device_unavailable_reason"](device_type=device_type)
            print(f"SKIP  {device_type:<10} ({backend.package}): no device: {reason}")
            continue
        for index in range(count):
            device = Device(device_type, index)
            problem, settings = _check_in_subprocess(device, args.verbose)
            if problem is None:
                print(f"PASS  {device!s:<10} ({backend.package} {backend.info.version})")
            else:
                failures += 1
                print(f"FAIL  {device!s:<10} ({backend.package}): {problem}")
            print(settings, end="")
    for broken in MANAGER.broken.values():
        failures += 1
        print(f"FAIL  plugin {broken.name} ({broken.package}): {broken.reason}")
    if not MANAGER.device_owner:
        print('FAIL  no backend installed: pip install "ember[cpu]"')
        return 1
    return 1 if failures else 0


def _demo(args: argparse.Namespace) -> int:
    from ember_core.demo import DEFAULT_EPOCHS, DemoDependencyError, run_demo

    epochs = DEFAULT_EPOCHS if args.epochs is None else args.epochs
    try:
        result = run_demo(device=args.device, seed=args.seed, epochs=epochs)
    except DemoDependencyError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if epochs < DEFAULT_EPOCHS:  # a shortened run reports its accuracy; only the full run is held to the target
        return 0
    return 0 if result["test_accuracy"] >= result["target_accuracy"] else 1


def _version() -> str:
    """The installed distribution's version (the source tree's when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ember")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _new_backend(args: argparse.Namespace) -> int:
    from ember_core.scaffold import ScaffoldError, new_backend

    try:
        root = new_backend(args.name, args.dest, device_type=args.device_type, memory=args.memory)
    except ScaffoldError as exc:
        print(f"ember new-backend: {exc}", file=sys.stderr)
        return 2
    print(f"generated {root}\nnext: pip install -e {root} && ember-conformance run --device "
          f"{args.device_type or args.name} --level 0 --out report/   (then see {root / 'README.md'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ember", description="Ember: backends, checks and the demo.")
    parser.add_argument("--version", action="version", version=f"ember {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("backends", help="list plugins, devices, providers and broken plugins with reasons")
    doctor = sub.add_parser("doctor", help="run a small computation on every device: PASS or FAIL with the cause")
    doctor.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of failures")
    demo = sub.add_parser("demo", help="train a small CNN on scikit-learn's digits; report accuracy and providers")
    demo.add_argument("--device", help="device to train on, e.g. cpu or vulkan:0 (default: the best available)")
    demo.add_argument("--epochs", type=int, default=None,
                      help="training epochs (default: 10, held to the accuracy target: exit 1 below it; "
                           "fewer epochs report the accuracy and exit 0)")
    demo.add_argument("--seed", type=int, default=0, help="seed for the weights, the split and the shuffling")
    new = sub.add_parser("new-backend", help="generate an installable backend package that passes conformance level 0")
    new.add_argument("name", help="plugin name: the package is ember-NAME, its module ember_NAME")
    new.add_argument("--device-type", help="the device type it owns (default: NAME)")
    new.add_argument("--memory", choices=("host", "device"), default="host",
                     help="host: memory the host addresses; device: a separate memory space with explicit copies")
    new.add_argument("--dest", default=".", help="directory to create ember-NAME in (default: here)")
    args = parser.parse_args(argv)
    from ember_core.errors import ConfigError

    try:
        return {"backends": _backends, "doctor": _doctor, "demo": _demo,
                "new-backend": _new_backend}[args.command](args)
    except ConfigError as exc:
        print(f"ember: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
