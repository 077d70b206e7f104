"""Which provider runs an op: kernel tables per (op, device type), priorities, the user's
preferences, composites, and the CPU fallback with its ledger.

Preferences, strongest first: the ``providers()`` / ``fallback_policy()`` context managers
(per thread), the environment (``EMBER_PROVIDERS="xnnpack,cpu,-vendor"``: listed names are
preferred in order, ``-name`` excludes; ``EMBER_FALLBACK=error|warn|allow``), then ``ember.toml``
in the working directory or at ``$EMBER_CONFIG``::

    [dispatch]
    prefer = ["xnnpack"]
    exclude = []
    fallback = "warn"

The configuration is read once per process (on first use), and every value is checked there: a
setting ember cannot use raises ConfigError naming its source (a misspelled provider name, a lone
string where a list belongs, an unknown policy), instead of being ignored or failing later.
Provider names must name a plugin: an installed one (broken ones included) or one of ember's own
(``PROJECT_PACKAGES``: cpu, xnnpack, vulkan, cuda, rocm, installed or not, so that one setting
serves every machine).  Decisions are cached per (op, device type, dtype, preferences); the caches
are dropped whenever plugins are (un)registered.

A kernel may decline a call whose parameters it does not support by returning ``NotImplemented``;
the next provider in rank order then runs it (``Choice.next``), down to the composite or the
fallback.  ``trace()`` records which provider served each call.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember_core import hotpath
from ember_core.errors import ConfigError, UnsupportedOpError
from ember_core.plugins import MANAGER, PROJECT_PACKAGES, Backend

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

POLICIES = ("error", "warn", "allow")


class FallbackWarning(UserWarning):
    """An op ran on the host because its device had no kernel for it."""


class Trace:
    """Calls counted per (op, device type, dtype, provider, how) while a ``trace()`` block runs.

    ``how`` is "native", "composite" or "fallback"; provider is None for a composite."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str, str | None, str], int] = {}

    def record(self, op: str, device_type: str, dtype: Any, provider: str | None, how: str) -> None:
        key = (op, device_type, getattr(dtype, "name", str(dtype)), provider, how)
        self.counts[key] = self.counts.get(key, 0) + 1

    def providers(self) -> dict[str, dict[str, int]]:
        """{op: {provider or "composite": calls}}, the view a report shows."""
        out: dict[str, dict[str, int]] = {}
        for (op, _, _, provider, how), n in self.counts.items():
            by = out.setdefault(op, {})
            name = provider if how == "native" else how if provider is None else f"{how}:{provider}"
            by[name] = by.get(name, 0) + n
        return out


@dataclass(frozen=True, eq=False)  # hashed by identity: it keys every plan cache on the hot path
class Preferences:
    prefer: tuple[str, ...] = ()
    exclude: frozenset[str] = frozenset()
    fallback: str = "warn"
    trace: Trace | None = None


@dataclass(frozen=True)
class Choice:
    """How one (op, device type, dtype) runs: a provider's kernel, the composite, or the fallback.

    ``next`` is what runs when this choice's kernel declines a call (returns NotImplemented)."""

    how: str  # "native" | "composite" | "fallback"
    provider: str | None
    kernel: Callable[..., Any] | None
    next: Choice | None = None


_DISPATCH_KEYS = ("prefer", "exclude", "fallback")


def _read_config() -> Preferences:
    """ember.toml's [dispatch] table, then the environment over it, each value checked as it is read."""
    table, where = _config_table()
    prefer = _name_list(table.get("prefer", []), f"{where} prefer")
    exclude = _name_list(table.get("exclude", []), f"{where} exclude")
    fallback, fallback_source = table.get("fallback", "warn"), f"{where} fallback"
    env = os.environ.get("EMBER_PROVIDERS")
    if env:
        entries = [x.strip() for x in env.split(",")]
        if "" in entries or "-" in entries:
            raise ConfigError(f"EMBER_PROVIDERS={env!r} has an empty entry; write plugin names separated by "
                              f"commas, '-name' to exclude one, e.g. EMBER_PROVIDERS=xnnpack,cpu,-vulkan")
        prefer = tuple(n for n in entries if not n.startswith("-"))
        exclude += tuple(n[1:] for n in entries if n.startswith("-"))
        _check_names((*prefer, *exclude), f"EMBER_PROVIDERS={env!r}")
    if "EMBER_FALLBACK" in os.environ:
        fallback, fallback_source = os.environ["EMBER_FALLBACK"], "EMBER_FALLBACK"
    _check_policy(fallback, fallback_source)
    return preferences(prefer, frozenset(exclude), fallback)


def _config_table() -> tuple[dict[str, Any], str]:
    """The [dispatch] table of ember.toml (in the working directory, or at $EMBER_CONFIG, which
    must then exist) and how messages name it."""
    explicit = os.environ.get("EMBER_CONFIG")
    path = Path(explicit or "ember.toml")
    where = f"{path} [dispatch]"
    if not path.is_file():
        if explicit:
            raise ConfigError(f"EMBER_CONFIG={explicit!r}: no such file; point it at an ember.toml, or unset it")
        return {}, where
    try:
        table = tomllib.loads(path.read_text()).get("dispatch", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it as TOML: {exc}") from None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: 'dispatch' must be a table ([dispatch] with keys {', '.join(_DISPATCH_KEYS)})")
    unknown = sorted(set(table) - set(_DISPATCH_KEYS))
    if unknown:
        raise ConfigError(f"{where} has unknown keys {unknown}; the keys are {', '.join(_DISPATCH_KEYS)}")
    return table, where


def _name_list(value: Any, source: str) -> tuple[str, ...]:
    """A TOML list of plugin names (a lone string is refused: it would be read as its letters)."""
    if not isinstance(value, list):
        raise ConfigError(f"{source} must be a list of plugin names, e.g. [\"xnnpack\"]; got {value!r}")
    _check_names(value, source)
    return tuple(value)


def _check_names(names: Iterable[Any], source: str) -> None:
    """Every name a string naming a plugin: an installed one (broken ones too) or one of ember's own."""
    names = list(names)
    wrong = [n for n in names if not isinstance(n, str) or not n]
    if wrong:
        raise ConfigError(f"{source}: provider names are plugin names (non-empty strings), got {wrong!r}")
    MANAGER.ensure_discovered()
    unknown = [n for n in names if n not in MANAGER.backends]
    if not unknown:
        return
    known = {*MANAGER.backends, *(b.name for b in MANAGER.broken.values()), *PROJECT_PACKAGES}
    unknown = [n for n in unknown if n not in known]
    if unknown:
        raise ConfigError(f"{source}: no plugin is named {', '.join(map(repr, unknown))}; the names are "
                          f"{', '.join(sorted(known))} (installed: {', '.join(sorted(MANAGER.backends)) or 'none'}; "
                          f"see ember backends)")


def _check_policy(policy: Any, source: str) -> None:
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ConfigError(f"{source}: {policy!r} is not a fallback policy; use one of {', '.join(POLICIES)}")


_interned: dict[tuple[Any, ...], Preferences] = {}


def preferences(prefer: tuple[str, ...], exclude: frozenset[str], fallback: str,
                trace: Trace | None = None) -> Preferences:
    """One object per distinct setting.  Plan caches key on its identity, so a ``with providers(...)``
    block entered every training step finds the plans the previous block made; a fresh object per
    block re-planned every op inside it and grew the caches without bound.  A traced block gets its
    own object (its kernels are wrapped with its log), whose plans ``trace()`` drops on exit."""
    if trace is not None:
        return Preferences(prefer, exclude, fallback, trace)
    key = (prefer, exclude, fallback)
    prefs = _interned.get(key)
    if prefs is None:
        prefs = _interned[key] = Preferences(prefer, exclude, fallback)
    return prefs


class _State(threading.local):
    """``prefs``: a thread's ``with`` block sets it on the instance; outside any block a lookup
    finds the class attribute, the configuration's preferences (None until read), so the hot path
    reads one attribute either way."""

    prefs: Preferences | None = None


_state = _State()
_plan_caches: list[dict[Any, Any]] = []


def current() -> Preferences:
    prefs = _state.prefs
    if prefs is None:
        prefs = _State.prefs = _read_config()
    return prefs


def plan_cache() -> dict[Any, Any]:
    """A dict for plans keyed (among others) by ``current()``; emptied whenever plugins or the
    configuration change, since a Preferences object alive across the change would key stale plans."""
    cache: dict[Any, Any] = {}
    _plan_caches.append(cache)
    return cache


@contextlib.contextmanager
def _preferring(prefs: Preferences) -> Iterator[None]:
    saved = _state.__dict__.get("prefs")  # None outside any block: the configuration's applies on exit
    _state.prefs = prefs
    hotpath.pause()  # the compiled plans are the configuration's: not for this block, in any thread
    try:
        yield
    finally:
        hotpath.resume()
        if saved is None:
            del _state.prefs
        else:
            _state.prefs = saved


@contextlib.contextmanager
def providers(prefer: Any = (), exclude: Any = ()) -> Iterator[None]:
    """Prefer (in order) or exclude providers by plugin name inside a ``with`` block: a name, or an
    iterable of names."""
    old = current()
    prefer, exclude = _names_argument(prefer, "prefer"), _names_argument(exclude, "exclude")
    with _preferring(preferences(prefer, frozenset(exclude) | old.exclude, old.fallback, old.trace)):
        yield


def _names_argument(value: Any, argument: str) -> tuple[str, ...]:
    source = f"providers({argument}=...)"
    if isinstance(value, str):
        value = (value,)
    try:
        names = tuple(value)
    except TypeError:
        raise ConfigError(f"{source} takes a plugin name or an iterable of them, got {value!r}") from None
    _check_names(names, source)
    return names


@contextlib.contextmanager
def fallback_policy(policy: str) -> Iterator[None]:
    """``error`` | ``warn`` (once per op) | ``allow`` inside a ``with`` block."""
    _check_policy(policy, "fallback_policy()")
    old = current()
    with _preferring(preferences(old.prefer, old.exclude, policy, old.trace)):
        yield


@contextlib.contextmanager
def trace() -> Iterator[Trace]:
    """Count which provider served every op call in this thread inside a ``with`` block.

    Plans made inside the block wrap their kernels with a counter; outside it nothing is wrapped,
    so tracing costs nothing when off."""
    old = current()
    log = Trace()
    try:
        with _preferring(preferences(old.prefer, old.exclude, old.fallback, log)):
            yield log
    finally:
        _forget_plans_of(log)


def _forget_plans_of(log: Trace) -> None:
    """Drop the plans made under a finished trace (they are keyed by its preferences objects)."""
    for cache in _plan_caches:
        for key in [k for k in cache if isinstance(k, tuple)
                    and any(isinstance(part, Preferences) and part.trace is log for part in k)]:
            del cache[key]


def note_composite(op: str, device_type: str, dtype: Any) -> None:
    """Builders call this when an op runs as its composite (recorded only while tracing)."""
    log = current().trace
    if log is not None:
        log.record(op, device_type, dtype, None, "composite")


def _traced(kernel: Callable[..., Any], log: Trace, op: str, device_type: str, dtype: Any, provider: str,
            how: str) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        result = kernel(*args, **kwargs)
        if result is not NotImplemented:
            log.record(op, device_type, dtype, provider, how)
        return result

    grouped = getattr(kernel, "grouped", None)  # an update kernel's whole-group form (optim.toml)
    if grouped is not None:
        def counted_group(*lists: Any, **kwargs: Any) -> Any:
            result = grouped(*lists, **kwargs)
            if result is not NotImplemented:  # counted per parameter, as the per-parameter calls would be
                for _ in lists[0]:
                    log.record(op, device_type, dtype, provider, how)
            return result

        counted.grouped = counted_group  # type: ignore[attr-defined]
    return counted


def ranked_providers(device_type: str, prefs: Preferences) -> list[Backend]:
    backends = [b for b in MANAGER.providers(device_type) if b.name not in prefs.exclude]
    rank = {name: i for i, name in enumerate(prefs.prefer)}
    return sorted(backends, key=lambda b: (rank.get(b.name, len(rank)), -b.priority))


_choices: dict[tuple[Any, ...], Choice | None] = plan_cache()


def choose(op: str, device_type: str, dtype: Any, has_composite: bool, fallback_ok: bool) -> Choice | None:
    """The cached decision for one op on one device type and dtype; None: nothing can run it."""
    prefs = current()
    key = (op, device_type, dtype, prefs)
    try:
        return _choices[key]
    except KeyError:
        pass
    choice = None
    if has_composite:
        choice = Choice("composite", None, None)
    elif fallback_ok and device_type != "cpu":
        host = choose(op, "cpu", dtype, False, False)
        if host is not None and host.how == "native":
            choice = Choice("fallback", host.provider, host.kernel, host.next)
    natives = [b for b in ranked_providers(device_type, prefs) if dtype in b.manifest.kernels[device_type].get(op, ())]
    for backend in reversed(natives):  # built from the last resort up, so each links to the next
        choice = Choice("native", backend.name, backend.kernels(device_type)[op], choice)
    if choice is not None and prefs.trace is not None:
        choice = _with_trace(choice, prefs.trace, op, device_type, dtype)
    _choices[key] = choice
    return choice


def _with_trace(choice: Choice, log: Trace, op: str, device_type: str, dtype: Any) -> Choice:
    rest = choice.next and _with_trace(choice.next, log, op, device_type, dtype)
    kernel = choice.kernel and _traced(choice.kernel, log, op, device_type, dtype, choice.provider or "", choice.how)
    return Choice(choice.how, choice.provider, kernel, rest)


def _clear() -> None:
    """Forget cached decisions and re-read the configuration (plugins changed, or a test changed
    the environment).  A context manager's preferences in this thread stay in force."""
    for cache in _plan_caches:
        cache.clear()
    hotpath.clear()
    _State.prefs = None


MANAGER.on_change(_clear)


# ---- fallback ledger ---------------------------------------------------------------------------

@dataclass
class LedgerEntry:
    op: str
    device: str
    calls: int = 0
    bytes_moved: int = 0
    seconds: float = 0.0
    dtypes: set[str] = field(default_factory=set)


_ledger: dict[tuple[str, str], LedgerEntry] = {}
_warned: set[tuple[str, str, str]] = set()
_ledger_lock = threading.Lock()


def check_fallback_allowed(op: str, device: str, dtype: str) -> None:
    policy = current().fallback
    if policy == "error":
        raise UnsupportedOpError(
            f"{op} has no kernel on {device} for {dtype} and the fallback policy is 'error'; allow host fallback with "
            f"ember_core.fallback_policy('warn'), EMBER_FALLBACK=warn, or implement {op} in the backend"
        )
    if policy == "warn" and (op, device, dtype) not in _warned:
        _warned.add((op, device, dtype))
        warnings.warn(f"{op} ({dtype}) ran on the host (cpu fallback) because {device} has no {dtype} kernel for it; "
                      f"see ember_core.fallback_report()", FallbackWarning, stacklevel=user_stacklevel())


_CORE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside ember_core, for warnings raised deep inside
    it: the warning then names the user's line, not the core's."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_CORE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def record_fallback(op: str, device: str, dtype: str, nbytes: int, seconds: float) -> None:
    with _ledger_lock:
        entry = _ledger.setdefault((op, device), LedgerEntry(op, device))
        entry.calls += 1
        entry.bytes_moved += nbytes
        entry.seconds += seconds
        entry.dtypes.add(dtype)


def fallback_report() -> list[dict[str, Any]]:
    """What ran through the CPU fallback: op, device, calls, bytes moved, seconds, dtypes."""
    with _ledger_lock:
        return [
            {"op": e.op, "device": e.device, "calls": e.calls, "bytes_moved": e.bytes_moved,
             "seconds": e.seconds, "dtypes": sorted(e.dtypes)}
            for e in sorted(_ledger.values(), key=lambda e: -e.seconds)
        ]


def reset_fallback_report() -> None:
    with _ledger_lock:
        _ledger.clear()
        _warned.clear()


now = time.perf_counter
