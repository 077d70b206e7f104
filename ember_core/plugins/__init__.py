"""Plugin discovery, registration and validation.

``import ember_core`` loads nothing; the first use of a device (or ``ember backends``) discovers the
entry points in group ``ember.backends`` and registers each one in isolation: a plugin that raises
on import, lacks a hook, was built for another ABI, ships a bad manifest or claims a plugin name or
device type that another package claims too is recorded as broken with its reason, and every other
plugin keeps working.  Contested claims are settled from all entry points at once, never by which
came first on ``sys.path`` (see ``PROJECT_PACKAGES``).
"""

from __future__ import annotations

import difflib
import inspect
import re
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pluggy

from ember_core.errors import BackendUnavailableError, EmberError, PluginError, RegistryError
from ember_core.plugins import hookspecs
from ember_core.plugins.hookspecs import DEVICE_HOOKS, REQUIRED_HOOKS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

hookimpl = pluggy.HookimplMarker("ember")

ENTRY_POINT_GROUP = "ember.backends"
ABI_MAJOR = 1  # must equal EMBER_ABI_MAJOR in include/ember.h (a test checks)
ABI_MINOR = 0
MAX_NDIM = 16  # EMBER_MAX_NDIM: dims a kernel descriptor holds; the core reshapes beyond it

# The project's own distributions, by the plugin name and device type each provides.  When another
# installed package claims one of these names or device types too, this table decides, not the
# order of sys.path: the project's package keeps it (even when it failed to load) and the other
# is listed as broken, so installing a plugin can neither take over nor hide ember-cpu or
# ember-vulkan.  A vendor adding kernels for cpu tensors claims no device type (see
# docs/writing-a-backend.md).
PROJECT_PACKAGES = {name: f"ember-{name}" for name in ("cpu", "xnnpack", "vulkan", "cuda", "rocm")}


@dataclass(frozen=True)
class PluginInfo:
    """What ``ember_plugin_info`` returns."""

    name: str
    version: str
    abi: tuple[int, int]
    device_types: tuple[str, ...] = ()
    manifest: str | Path | None = None  # path of the capability manifest (TOML)
    package: str | None = None  # distribution name, for messages; defaults to ember-<name>


# Device properties (ember_device_properties) that change numerics, which `ember doctor` prints under each
# device and conformance reports record, besides every key ending in "_subnormals" ("preserved" or "flushed"
# per dtype); "gemm": which GEMM a GPU's float matmul runs on (the vendor's BLAS or ember's own kernel).
NUMERICS_KEYS = ("float_controls", "denormals", "flush_to_zero", "tf32", "deterministic", "fast_math", "gemm")


def numerics_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of a device's properties that change its numerics (NUMERICS_KEYS, *_subnormals)."""
    return {k: v for k, v in properties.items() if k in NUMERICS_KEYS or k.endswith("_subnormals")}


@dataclass
class Manifest:
    """A plugin's capability manifest: which ops it runs natively, for which dtypes."""

    priority: int
    kernels: dict[str, dict[str, frozenset]]  # device_type -> op -> dtypes
    xfail: dict[str, dict[str, str]]  # device_type -> "op:dtype" -> reason
    deterministic: dict[str, dict[str, bool]] = field(default_factory=dict)  # device_type -> op -> same bits
    # on every run with the same inputs and device (no float atomics, no order set by timing); unlisted: undeclared


@dataclass
class Backend:
    """One registered plugin, its hooks resolved to plain callables for the hot path."""

    info: PluginInfo
    module: Any
    manifest: Manifest
    hooks: dict[str, Callable[..., Any]]
    vendor_ops: list[str] = field(default_factory=list)  # declared by its ember_op_declarations
    _kernels: dict[str, Mapping[str, Callable[..., None]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def package(self) -> str:
        return self.info.package or f"ember-{self.info.name}"

    @property
    def priority(self) -> int:
        return self.manifest.priority

    def kernels(self, device_type: str) -> Mapping[str, Callable[..., None]]:
        """The plugin's kernels for a device type, fetched once and checked against the manifest."""
        table = self._kernels.get(device_type)
        if table is None:
            table = dict(self.hooks["ember_kernels"](device_type=device_type) or {})
            claimed = set(self.manifest.kernels.get(device_type, {}))
            missing, unclaimed = claimed - set(table), set(table) - claimed
            if missing or unclaimed:
                raise PluginError(
                    f"{self.package}: its manifest and ember_kernels({device_type!r}) disagree: "
                    f"claimed without a kernel {sorted(missing)}, kernels not in the manifest "
                    f"{sorted(unclaimed)}; fix the manifest or the kernel table"
                )
            self._kernels[device_type] = table
        return table


@dataclass
class BrokenPlugin:
    name: str
    package: str | None
    reason: str
    device_types: tuple[str, ...] = ()  # those it claims, when it got as far as saying


@dataclass
class _Candidate:
    """A plugin that imported and said who it is: what it claims, before anything is registered."""

    module: Any
    hooks: dict[str, Callable[..., Any]]
    info: PluginInfo
    package: str | None  # the distribution that installed it (None: registered directly)

    @property
    def label(self) -> str:
        return self.package or self.info.package or f"ember-{self.info.name}"


class PluginManager:
    """Holds every backend of the process.  Thread-safe discovery; lookups are lock-free."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("ember")
        self.pm.add_hookspecs(hookspecs)
        self.backends: dict[str, Backend] = {}
        # by plugin name; a second broken plugin of one name is keyed "name (package)"
        self.broken: dict[str, BrokenPlugin] = {}
        self.device_owner: dict[str, Backend] = {}
        self._discovered = False
        self._lock = threading.RLock()
        self._listeners: list[Callable[[], None]] = []

    # ---- discovery ---------------------------------------------------------------------------

    def ensure_discovered(self) -> None:
        if self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            import importlib.metadata  # here, not at import: ~15 ms that `import ember_core` need not pay

            entry_points = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=_discovery_order)
            installed = {_distribution(ep) for ep in entry_points}
            candidates = []
            for ep in entry_points:
                package = ep.dist.name if ep.dist is not None else None
                try:
                    module = ep.load()
                except Exception as exc:  # any failure of third-party code is isolated
                    self._mark_broken(ep.name, package, f"import failed: {_describe(exc)}")
                    continue
                try:
                    candidates.append(self._identify(module, package))
                except Exception as exc:
                    self._mark_broken(ep.name, package, _describe(exc))
            refused = _contested_claims(candidates, installed)
            for candidate in candidates:
                reason = refused.get(id(candidate))
                if reason is None:
                    self._register_isolated(candidate)
                else:
                    self._mark_broken(candidate.info.name, candidate.label, reason, candidate.info.device_types)
            self._discovered = True
            self._changed()

    def register(self, module: Any) -> Backend:
        """Register a plugin that is not an installed package (a vendor prototyping): a module, a
        class of hooks or an instance of one.

        Raises PluginError with the reason instead of recording it as broken: the caller is the
        developer who can fix it.
        """
        with self._lock:
            self.ensure_discovered()
            backend = self._register(self._identify(module, None))
            self._changed()
            return backend

    def unregister(self, name: str) -> None:
        with self._lock:
            backend = self.backends.pop(name, None)
            self.broken.pop(name, None)
            if backend is not None:
                from ember_core.ops import unload_vendor_ops

                unload_vendor_ops(backend.vendor_ops)
                self.pm.unregister(backend.module)
                for device_type in backend.info.device_types:
                    self.device_owner.pop(device_type, None)
                from ember_core.device import forget_device_types

                forget_device_types(backend.info.device_types)
            self._changed()

    def on_change(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` whenever the set of backends changes (dispatch caches listen)."""
        self._listeners.append(callback)

    def _changed(self) -> None:
        for callback in self._listeners:
            callback()

    def _mark_broken(self, name: str, package: str | None, reason: str, device_types: tuple[str, ...] = ()) -> None:
        key = name if name not in self.broken and name not in self.backends else f"{name} ({package})"
        self.broken[key] = BrokenPlugin(name, package, reason, device_types)

    def _register(self, candidate: _Candidate) -> Backend:
        backend = self._validate(candidate)
        self.pm.register(candidate.module, name=backend.name)
        self.backends[backend.name] = backend
        for device_type in backend.info.device_types:
            self.device_owner[device_type] = backend
        return backend

    def _register_isolated(self, candidate: _Candidate) -> None:
        try:
            self._register(candidate)
        except Exception as exc:  # third-party code: whatever it raises is recorded, not propagated
            self._mark_broken(candidate.info.name, candidate.label, _describe(exc), candidate.info.device_types)

    @staticmethod
    def _identify(module: Any, package: str | None) -> _Candidate:
        """The plugin's hooks and its PluginInfo; ``package``, the installed distribution, replaces
        the package the plugin names itself: it is what ``pip uninstall`` takes, and what decides
        a contested claim."""
        if inspect.isclass(module):  # a class of hooks (an entry point may name one): its instance is the plugin
            module = module()
        hooks = _collect_hooks(module)
        missing = [h for h in REQUIRED_HOOKS if h not in hooks]
        if missing:
            raise PluginError(f"{package or module!r} lacks required hooks {missing}; see ember_core.plugins.hookspecs")
        info = _guarded(hooks["ember_plugin_info"], package or repr(module), "ember_plugin_info")()
        if not isinstance(info, PluginInfo):
            raise PluginError(f"{package or module!r}: ember_plugin_info must return ember_core.plugins.PluginInfo")
        if package:
            info = PluginInfo(**{**info.__dict__, "package": package})
        label = package or info.package or f"ember-{info.name}"
        hooks = {name: fn if name in _UNGUARDED else _guarded(fn, label, name) for name, fn in hooks.items()}
        return _Candidate(module, hooks, info, package)

    def _validate(self, candidate: _Candidate) -> Backend:
        module, hooks, info, label = candidate.module, candidate.hooks, candidate.info, candidate.label
        vendor_ops: list[str] = []
        try:
            _check_abi(info, label)
            if info.name in self.backends:
                raise PluginError(f"{label}: a plugin named {info.name!r} is already registered "
                                  f"({self.backends[info.name].package}); uninstall one of them")
            if info.device_types:
                missing = [h for h in DEVICE_HOOKS if h not in hooks]
                if missing:
                    raise PluginError(f"{label} owns device types {list(info.device_types)} but lacks "
                                      f"the device hooks {missing}{_misspelling_hint(module, missing)}; "
                                      f"see ember_core.plugins.hookspecs")
            for device_type in info.device_types:
                if device_type in self.device_owner:
                    owner = self.device_owner[device_type]
                    raise PluginError(f"{label} claims device type {device_type!r}, already owned by "
                                      f"{owner.package}; uninstall one of them")
                if not device_type.isidentifier() or ":" in device_type:
                    raise PluginError(f"{label}: device type {device_type!r} must be an identifier")
            if "ember_op_declarations" in hooks:  # vendor ops first: the manifest may name them
                from ember_core.ops import load_vendor_file

                for path in hooks["ember_op_declarations"]() or ():
                    vendor_ops += load_vendor_file(str(path))
            manifest = load_manifest(info.manifest, label)
            _check_hook_signatures(self.pm, module, label)
            backend = Backend(info=info, module=module, manifest=manifest, hooks=hooks, vendor_ops=vendor_ops)
            for device_type in manifest.kernels:  # a manifest that lies about its kernels is broken now, not at use
                backend.kernels(device_type)
        except Exception:
            if vendor_ops:  # a plugin that is not registered leaves no ops behind
                from ember_core.ops import unload_vendor_ops

                unload_vendor_ops(vendor_ops)
            raise
        return backend

    # ---- lookups -------------------------------------------------------------------------------

    def owner(self, device_type: str) -> Backend:
        self.ensure_discovered()
        backend = self.device_owner.get(device_type)
        if backend is not None:
            return backend
        for broken in self.broken.values():
            if device_type == broken.name or device_type in broken.device_types:
                raise BackendUnavailableError(f"the {device_type!r} backend ({broken.package}) is broken: "
                                              f"{broken.reason}")
        known = ", ".join(sorted(self.device_owner)) or "none"
        raise BackendUnavailableError(
            f"no installed backend provides device type {device_type!r} (available: {known}); "
            + _install_hint(device_type, set(self.device_owner))
        )

    def providers(self, device_type: str) -> list[Backend]:
        """Every backend with kernels for ``device_type``, highest priority first."""
        self.ensure_discovered()
        found = [b for b in self.backends.values() if device_type in b.manifest.kernels]
        return sorted(found, key=lambda b: -b.priority)

    def broadcast(self, hook: str, **kwargs: Any) -> list[Any]:
        """Call an optional hook on every plugin that implements it."""
        self.ensure_discovered()
        return getattr(self.pm.hook, hook)(**kwargs)


# Device types of ember's own backends, each installed by the extra of its name (pyproject.toml).
PROJECT_DEVICE_TYPES = ("cpu", "vulkan", "cuda", "rocm")


def _install_hint(device_type: str, installed: set[str]) -> str:
    """What to do about a device type no backend provides: the extra that installs it when ember
    has one, else the nearest known device type, else where to look."""
    if device_type in PROJECT_DEVICE_TYPES:
        return f'install its backend: pip install "ember[{device_type}]"'
    near = difflib.get_close_matches(device_type, sorted(installed | set(PROJECT_DEVICE_TYPES)), n=1)
    if near:
        return f"did you mean {near[0]!r}?"
    return ("ember has no backend of that name; a vendor's backend is installed from the vendor's package "
            "(`ember backends` lists what is installed)")


def _normalized(package: str) -> str:
    """A distribution name as PEP 503 compares them (ember_cpu, Ember.CPU and ember-cpu are one)."""
    return re.sub(r"[-_.]+", "-", package).lower()


def _distribution(ep: Any) -> str | None:
    """The normalized name of the distribution that installed an entry point."""
    return _normalized(ep.dist.name) if ep.dist is not None else None


def _discovery_order(ep: Any) -> tuple[bool, str, str]:
    """The project's packages first, then by package and entry-point name: what is listed as broken
    under which key never depends on sys.path."""
    package = _distribution(ep) or ""
    return package not in PROJECT_PACKAGES.values(), package, ep.name


def _contested_claims(candidates: list[_Candidate], installed: set[str | None]) -> dict[int, str]:
    """Why each candidate claiming a plugin name or device type that another claims too is refused
    (by id).  Decided from every claim at once: the project's package for a name or device type
    (PROJECT_PACKAGES) keeps it whenever it is installed, even broken; between other claimants,
    none gets it."""
    claims: dict[tuple[str, str], list[_Candidate]] = {}
    for candidate in candidates:
        info = candidate.info
        for claim in (("plugin name", info.name), *(("device type", t) for t in info.device_types)):
            claims.setdefault(claim, []).append(candidate)
    refused: dict[int, str] = {}
    for (what, value), claimants in claims.items():
        owner = PROJECT_PACKAGES.get(value)
        if owner in installed:
            fix = (f"a package adding kernels for {value} tensors claims no device type and lists them under "
                   f"[kernels.{value}] in its manifest (docs/writing-a-backend.md)" if what == "device type"
                   else "rename the plugin (PluginInfo.name)")
            for rival in (c for c in claimants if _normalized(c.package or "") != owner):
                refused.setdefault(id(rival), f"{rival.label} claims the {what} {value!r}, which belongs to "
                                              f"{owner}, ember's own package for it; {fix}, or uninstall {rival.label}")
        elif len(claimants) > 1:
            packages = " and ".join(c.label for c in claimants)
            for rival in claimants:
                refused.setdefault(id(rival), f"{packages} all claim the {what} {value!r}; uninstall all but one")
    return refused


def _collect_hooks(module: Any) -> dict[str, Callable[..., Any]]:
    """The hookimpl-marked functions of a module or object, by hook name, each callable with the
    spec's full keyword arguments (pluggy lets an implementation accept a subset)."""
    hooks = {}
    for attr in dir(module):
        fn = getattr(module, attr, None)
        opts = getattr(fn, "ember_impl", None)
        if opts is not None and callable(fn):
            name = opts.get("specname") or attr
            spec = getattr(hookspecs, name, None)
            hooks[name] = _adapt(fn, spec) if spec is not None else fn
    return hooks


def _adapt(fn: Callable[..., Any], spec: Callable[..., Any]) -> Callable[..., Any]:
    """A callable taking the spec's arguments (positionally or by name) for an implementation
    that declares only some of them."""
    wanted = tuple(inspect.signature(fn).parameters)
    spec_names = tuple(inspect.signature(spec).parameters)
    if wanted == spec_names:
        return fn

    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs.update(zip(spec_names, args))
        return fn(**{k: kwargs[k] for k in wanted if k in kwargs})

    return call


_HOOK_NAMES = [name for name in dir(hookspecs) if name.startswith("ember_")]
# Not wrapped in PluginError: the allocator's hot path, where MemoryError is the contract and free never raises.
_UNGUARDED = frozenset({"ember_alloc", "ember_free"})


def _guarded(fn: Callable[..., Any], label: str, hook: str) -> Callable[..., Any]:
    """``fn``, whose exceptions other than ember's own errors and MemoryError become a PluginError
    naming the plugin and the hook (the traceback keeps the original as its cause)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (EmberError, MemoryError):
            raise
        except Exception as exc:
            raise PluginError(f"{label}: its hook {hook} raised {type(exc).__name__}: {exc}") from exc

    return call


def _misspelling_hint(module: Any, missing: list[str]) -> str:
    """For missing hooks: the plugin's attributes that look like misspellings of them."""
    names = [a for a in dir(module) if a.startswith("ember") and a not in _HOOK_NAMES]
    found = [f"{near[0]!r} looks like a misspelling of {hook!r}" for hook in missing
             if (near := difflib.get_close_matches(hook, names, n=1))]
    return f" ({'; '.join(found)})" if found else ""


def _check_hook_signatures(pm: pluggy.PluginManager, module: Any, label: str) -> None:
    """pluggy rejects a hookimpl whose arguments are not in its spec; unknown hook names are ours to catch."""
    for name in _collect_hooks(module):
        if not name.startswith("ember_") or not hasattr(hookspecs, name):
            near = difflib.get_close_matches(name, _HOOK_NAMES, n=1)
            guess = f"a misspelling of {near[0]!r}?" if near else "a typo?"
            raise PluginError(f"{label}: {name!r} is marked as a hook but no such hook exists in "
                              f"ember_core.plugins.hookspecs ({guess})")
    probe = pluggy.PluginManager("ember")
    probe.add_hookspecs(hookspecs)
    try:
        probe.register(module)
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"{label}: {exc}") from None


def _check_abi(info: PluginInfo, label: str) -> None:
    try:
        major, minor = (int(x) for x in info.abi)
    except (TypeError, ValueError):
        raise PluginError(f"{label}: PluginInfo.abi must be (major, minor), got {info.abi!r}") from None
    if major != ABI_MAJOR:
        raise PluginError(
            f"{label} {info.version} was built for the ember ABI {major}.{minor}, but this ember speaks "
            f"{ABI_MAJOR}.{ABI_MINOR}; rebuild it against this ember: "
            f"pip install --force-reinstall --no-binary {label} {label}"
        )
    if minor > ABI_MINOR:
        raise PluginError(
            f"{label} {info.version} needs the ember ABI {major}.{minor}, newer than this ember's "
            f"{ABI_MAJOR}.{ABI_MINOR}; upgrade the core: pip install -U ember"
        )


def load_manifest(path: str | Path | None, label: str) -> Manifest:
    """Parse a capability manifest; every problem names the file and the entry."""
    if path is None:
        return Manifest(priority=0, kernels={}, xfail={})
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PluginError(f"{label}: cannot read its manifest {path}: {exc}") from None
    from ember_core.ops.registry import REGISTRY, resolve_dtypes

    priority = data.get("plugin", {}).get("priority", 0)
    if not isinstance(priority, int):
        raise PluginError(f"{label}: {path}: [plugin] priority must be an integer")
    kernels: dict[str, dict[str, frozenset]] = {}
    for device_type, ops in data.get("kernels", {}).items():
        table = kernels[device_type] = {}
        for op, spec in ops.items():
            schema = REGISTRY.get(op)
            if schema is None:
                raise PluginError(f"{label}: {path}: [kernels.{device_type}] names {op!r}, which no op "
                                  f"declaration defines")
            try:
                table[op] = schema.dtypes if spec == "registry" else resolve_dtypes(spec)
            except RegistryError as exc:
                raise PluginError(f"{label}: {path}: [kernels.{device_type}] {op}: {exc}") from None
    xfail = {dt: dict(entries) for dt, entries in data.get("xfail", {}).items()}
    deterministic: dict[str, dict[str, bool]] = {}
    for device_type, flags in data.get("deterministic", {}).items():
        for op, flag in flags.items():
            if op not in kernels.get(device_type, {}) or not isinstance(flag, bool):
                raise PluginError(f"{label}: {path}: [deterministic.{device_type}] {op} = {flag!r}: each entry is "
                                  f"true or false for an op claimed in [kernels.{device_type}]")
        deterministic[device_type] = dict(flags)
    return Manifest(priority=priority, kernels=kernels, xfail=xfail, deterministic=deterministic)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (PluginError, BackendUnavailableError)):
        return str(exc)
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    loc = f" (at {where[0].filename}:{where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}{loc}"


MANAGER = PluginManager()


def register(module: Any) -> Backend:
    """Register a plugin (a module, a class of hooks or an instance) directly, no installed package needed."""
    return MANAGER.register(module)


def unregister(name: str) -> None:
    MANAGER.unregister(name)


__all__ = ["ABI_MAJOR", "ABI_MINOR", "MANAGER", "Backend", "PluginInfo", "hookimpl", "register", "unregister"]
