"""Discovery, registration and isolation of plugins; the ABI handshake; the fallback ledger."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from toy_backend import Toy

import ember_core as em
from ember_core import plugins
from ember_core.dispatch import FallbackWarning
from ember_core.ops.registry import REGISTRY
from ember_core.plugins import ABI_MAJOR, ABI_MINOR, MANAGER


def test_abi_constants_match_header():
    header = Path(em.get_include(), "ember.h").read_text()
    assert int(re.search(r"#define EMBER_ABI_MAJOR (\d+)", header)[1]) == ABI_MAJOR
    assert int(re.search(r"#define EMBER_ABI_MINOR (\d+)", header)[1]) == ABI_MINOR


def test_import_loads_no_plugin():
    code = "import sys, ember_core; print(any(m.startswith('ember_cpu') for m in sys.modules))"
    assert subprocess.check_output([sys.executable, "-c", code], text=True).strip() == "False"


class _Variant(Toy):
    def __init__(self, **attrs):
        for k, v in attrs.items():
            setattr(self, k, v)


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        (_Variant(name="toy_major", abi=(ABI_MAJOR + 1, 0), device_types=("toymajor",)),
         "rebuild it against this ember"),
        (_Variant(name="toy_minor", abi=(ABI_MAJOR, ABI_MINOR + 1), device_types=("toyminor",)),
         "pip install -U ember"),
        (_Variant(name="cpu_clash", device_types=("cpu",)), "already owned by ember-cpu"),
    ],
)
def test_contract_violations_are_refused_with_the_fix(variant, message):
    with pytest.raises(em.PluginError, match=message):
        plugins.register(variant)
    assert variant.name not in MANAGER.backends


def test_missing_device_hook_is_an_error_at_registration():
    class NoFree(Toy):
        name = "nofree"
        device_types = ("nofree",)

    NoFree.ember_free = None  # the hook is gone
    with pytest.raises(em.PluginError, match=r"lacks the device hooks .*ember_free"):
        plugins.register(NoFree())


def test_misspelled_hook_is_an_error():
    class Typo(Toy):
        name = "typo"
        device_types = ("typo",)

        @plugins.hookimpl
        def ember_alocate(self, device, nbytes):
            return None

    with pytest.raises(em.PluginError, match="ember_alocate"):
        plugins.register(Typo())


def test_broken_entry_point_does_not_break_import(tmp_path):
    """A plugin that raises at import is listed as broken; ember and ember-cpu keep working."""
    dist = tmp_path / "ember_broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ember-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ember.backends]\nbroken = ember_broken_plugin\n")
    (tmp_path / "ember_broken_plugin.py").write_text("raise RuntimeError('driver exploded')\n")
    code = (
        "import ember_core as em\n"
        "x = em.ones(3) + 1\n"
        "from ember_core.plugins import MANAGER\n"
        "print(x.tolist(), MANAGER.broken['broken'].reason)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "[2.0, 2.0, 2.0]" in out.stdout and "driver exploded" in out.stdout


class _EntryPoint:
    """An entry point of an installed distribution, as importlib.metadata lists them."""

    def __init__(self, package, plugin, name=None):
        self.name = name or getattr(plugin, "name", "plugin")
        self.dist = type("Dist", (), {"name": package})()
        self.plugin = plugin

    def load(self):
        if isinstance(self.plugin, Exception):
            raise self.plugin
        return self.plugin


def _discovered(entry_points, monkeypatch):
    """A fresh plugin manager that discovers exactly these entry points, in this order; what it
    registered and refused, by name."""
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: list(entry_points))
    manager = plugins.PluginManager()
    manager.ensure_discovered()
    owners = {device_type: b.package for device_type, b in manager.device_owner.items()}
    backends = {name: b.package for name, b in manager.backends.items()}
    broken = sorted((b.name, b.package, b.reason) for b in manager.broken.values())
    return manager, (owners, backends, broken)


_CPU = _EntryPoint("ember-cpu", _Variant(name="cpu", device_types=("cpu",)))
_VULKAN = _EntryPoint("ember-vulkan", _Variant(name="vulkan", device_types=("vulkan",)))


@pytest.mark.parametrize("order", ["as listed", "reversed"])
def test_a_plugin_claiming_cpu_cannot_take_it_over(order, monkeypatch):
    """ember-cpu keeps the cpu device type whatever the discovery order; the newcomer is listed
    as broken with both packages and the way to add cpu kernels without claiming the device."""
    rival = _EntryPoint("acme-cpu", _Variant(name="acmecpu", device_types=("cpu",)))
    entries = [rival, _CPU] if order == "as listed" else [_CPU, rival]
    _, (owners, backends, broken) = _discovered(entries, monkeypatch)
    assert owners == {"cpu": "ember-cpu"} and backends == {"cpu": "ember-cpu"}
    ((name, package, reason),) = broken
    assert (name, package) == ("acmecpu", "acme-cpu")
    assert "acme-cpu claims the device type 'cpu', which belongs to ember-cpu" in reason
    assert "[kernels.cpu]" in reason


@pytest.mark.parametrize("order", ["as listed", "reversed"])
def test_a_plugin_named_vulkan_neither_hides_nor_replaces_ember_vulkan(order, monkeypatch):
    """A third-party plugin whose name is vulkan (even calling itself ember-vulkan in its
    PluginInfo: the installed distribution is what counts) is refused and listed."""
    rival = _EntryPoint("acme-gpu", _Variant(name="vulkan", device_types=("acmegpu",)), name="acmegpu")
    entries = [rival, _VULKAN] if order == "as listed" else [_VULKAN, rival]
    manager, (owners, backends, broken) = _discovered(entries, monkeypatch)
    assert backends == {"vulkan": "ember-vulkan"} and owners == {"vulkan": "ember-vulkan"}
    assert broken == [("vulkan", "acme-gpu", "acme-gpu claims the plugin name 'vulkan', which belongs to "
                                             "ember-vulkan, ember's own package for it; rename the plugin "
                                             "(PluginInfo.name), or uninstall acme-gpu")]
    with pytest.raises(em.BackendUnavailableError, match="acme-gpu"):
        manager.owner("acmegpu")


@pytest.mark.parametrize("order", ["as listed", "reversed"])
def test_two_third_party_claims_of_one_device_type_are_both_refused(order, monkeypatch):
    first = _EntryPoint("acme-a", _Variant(name="npua", device_types=("npu",)))
    second = _EntryPoint("acme-b", _Variant(name="npub", device_types=("npu",)))
    entries = [first, second] if order == "as listed" else [second, first]
    manager, (owners, backends, broken) = _discovered(entries, monkeypatch)
    assert owners == {} and backends == {}
    assert [(name, package) for name, package, _ in broken] == [("npua", "acme-a"), ("npub", "acme-b")]
    assert all("acme-a and acme-b all claim the device type 'npu'" in reason for _, _, reason in broken)
    with pytest.raises(em.BackendUnavailableError, match=r"\(acme-a\) is broken: acme-a and acme-b all claim"):
        manager.owner("npu")


@pytest.mark.parametrize("order", ["as listed", "reversed"])
def test_two_third_party_plugins_of_one_name_are_both_listed(order, monkeypatch):
    first = _EntryPoint("acme-a", _Variant(name="fast", device_types=()))
    second = _EntryPoint("acme-b", _Variant(name="fast", device_types=()))
    entries = [first, second] if order == "as listed" else [second, first]
    manager, (_, backends, broken) = _discovered(entries, monkeypatch)
    assert backends == {} and [package for _, package, _ in broken] == ["acme-a", "acme-b"]
    assert sorted(manager.broken) == ["fast", "fast (acme-b)"]


@pytest.mark.parametrize("order", ["as listed", "reversed"])
def test_the_project_package_keeps_its_name_when_it_fails_to_load(order, monkeypatch):
    own = _EntryPoint("ember-vulkan", ImportError("libvulkan.so.1: cannot open"), name="vulkan")
    rival = _EntryPoint("acme-gpu", _Variant(name="vulkan", device_types=("vulkan",)), name="acmegpu")
    entries = [rival, own] if order == "as listed" else [own, rival]
    manager, (owners, backends, broken) = _discovered(entries, monkeypatch)
    assert owners == {} and backends == {}
    assert [(name, package) for name, package, _ in broken] == [("vulkan", "acme-gpu"), ("vulkan", "ember-vulkan")]
    with pytest.raises(em.BackendUnavailableError, match=r"\(ember-vulkan\) is broken: import failed.*libvulkan"):
        manager.owner("vulkan")


def _takeover_package(tmp_path):
    """An installed distribution acme-takeover whose plugin is ember-cpu's hooks under its own
    package: it claims the plugin name cpu and the device type cpu."""
    dist = tmp_path / "acme_takeover-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-takeover\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ember.backends]\nacme = acme_takeover\n")
    (tmp_path / "acme_takeover.py").write_text(
        "from ember_cpu import plugin\n"
        "globals().update({k: v for k, v in vars(plugin).items() if k.startswith('ember_')})\n")


@pytest.mark.parametrize("where", ["insert(0, path)", "append(path)"], ids=["first", "last"])
def test_cli_lists_the_refused_newcomer_with_both_packages(tmp_path, where):
    _takeover_package(tmp_path)
    code = (f"import sys; path = {str(tmp_path)!r}; sys.path.{where}\n"
            "from ember_core.cli import main\n"
            "main(['backends']); print('---'); main(['doctor'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    listing, doctor = out.stdout.split("---")
    assert re.search(r"^cpu +ember-cpu .* ok \(priority 0\)$", listing, re.M), listing
    (row,) = [line for line in listing.splitlines() if "BROKEN" in line]
    assert row.startswith("cpu ") and "acme-takeover claims the plugin name 'cpu', which belongs to ember-cpu" in row
    assert "PASS  cpu" in doctor and "FAIL  plugin cpu (acme-takeover)" in doctor


def test_two_backends_coexist_and_dispatch_by_device(toy):
    a = em.ones(4, device="toy")
    assert a.device == "toy"
    assert (a + a).tolist() == [2.0] * 4
    assert (em.ones(4) + em.ones(4)).device == "cpu"


def test_mixing_devices_names_both(toy):
    with pytest.raises(em.DeviceError, match=r"toy:0.*cpu|cpu.*toy:0"):
        em.ones(2, device="toy") + em.ones(2)


def test_fallback_policy_and_ledger(toy):
    em.reset_fallback_report()
    x = em.ones(3, device="toy")
    with em.fallback_policy("error"), pytest.raises(em.UnsupportedOpError, match="multiply has no kernel on toy"):
        x * x
    with pytest.warns(FallbackWarning):
        y = x * x
    assert y.device == "toy" and y.tolist() == [1.0, 1.0, 1.0]
    with em.fallback_policy("allow"):
        x * x
    (entry,) = [e for e in em.fallback_report() if e["op"] == "multiply"]
    assert entry["calls"] == 2 and entry["device"] == "toy:0" and entry["bytes_moved"] == 2 * 3 * 12


def test_composite_runs_on_a_device_without_the_kernel(toy):
    x = em.asarray([1.0, 2.0, 3.0], device="toy")
    with em.fallback_policy("allow"):
        assert em.mean(x).item() == pytest.approx(2.0)


def test_provider_exclusion_makes_ops_unsupported():
    with em.providers(exclude=["cpu"]), pytest.raises(em.UnsupportedOpError, match="no kernel for float32 on cpu"):
        em.ones(2) + em.ones(2)
    assert (em.ones(2) + em.ones(2)).tolist() == [2.0, 2.0]


def test_unknown_device_type_names_the_fix():
    with pytest.raises(em.BackendUnavailableError, match="ember has no backend of that name") as info:
        em.ones(2, device="nosuch")
    assert "pip install" not in str(info.value)  # no extra ember[nosuch] exists


def test_near_miss_of_a_device_type_says_did_you_mean():
    with pytest.raises(em.BackendUnavailableError, match="did you mean 'vulkan'"):
        em.ones(2, device="vulkn")


def test_a_project_device_type_not_installed_names_its_extra(monkeypatch):
    from ember_core.plugins import MANAGER

    monkeypatch.delitem(MANAGER.device_owner, "cuda", raising=False)
    monkeypatch.setattr(MANAGER, "broken", {})
    with pytest.raises(em.BackendUnavailableError, match=r'pip install "ember\[cuda\]"'):
        MANAGER.owner("cuda")


def test_cli_backends_and_doctor():
    out = subprocess.run([sys.executable, "-m", "ember_core.cli", "backends"], capture_output=True, text=True)
    assert out.returncode == 0 and "ember-cpu" in out.stdout
    out = subprocess.run([sys.executable, "-m", "ember_core.cli", "doctor"], capture_output=True, text=True)
    assert out.returncode == 0 and "PASS  cpu" in out.stdout


def test_plugin_declares_and_implements_a_vendor_op(tmp_path):
    """A vendor op declared by the plugin's TOML is callable through ember_core.ops and runs the
    plugin's kernel on its device."""
    decl = tmp_path / "vendor.toml"
    decl.write_text('namespace = "toyvendor"\n[ops.twice]\nsignature = "(x: Tensor, /) -> Tensor"\n'
                    'family = "unary"\ndtypes = "real_floating"\nderivatives = { x = "grad * 2" }\n')
    manifest = tmp_path / "manifest.toml"
    manifest.write_text('[kernels.vtoy]\nfull = "registry"\ncopy = "registry"\n"toyvendor.twice" = ["float32"]\n')

    class Vendor(Toy):
        name = "vendortoy"
        device_types = ("vtoy",)

        @plugins.hookimpl
        def ember_op_declarations(self):
            return [str(decl)]

        @plugins.hookimpl
        def ember_plugin_info(self):
            return plugins.PluginInfo(name=self.name, version="1", abi=self.abi, device_types=self.device_types,
                                      manifest=manifest)

        @plugins.hookimpl
        def ember_kernels(self, device_type):
            table = dict(Toy.ember_kernels(self, "toy"))

            def twice(out, x):
                table["add"](out, x, x)

            return {"full": table["full"], "copy": table["copy"], "toyvendor.twice": twice}

    backend = plugins.register(Vendor())
    try:
        x = em.full((3,), 1.5, device="vtoy")
        assert em.ops.namespace.toyvendor.twice(x).tolist() == [3.0, 3.0, 3.0]
        x.requires_grad_()  # the vendor's derivative formula gives it gradients with no code of its own
        em.ops.namespace.toyvendor.twice(x).backward(em.ones(3, device="vtoy"))
        assert x.grad.tolist() == [2.0, 2.0, 2.0]
    finally:
        plugins.unregister(backend.name)
    assert REGISTRY.get("toyvendor.twice") is None, "an unregistered plugin's vendor ops go with it"
    assert not hasattr(em.ops.namespace.toyvendor, "twice")

    class BrokenManifest(Vendor):
        name = "brokenvendortoy"

        @plugins.hookimpl
        def ember_plugin_info(self):
            return plugins.PluginInfo(name=self.name, version="1", abi=self.abi, device_types=self.device_types,
                                      manifest=tmp_path / "missing.toml")

    with pytest.raises(em.PluginError):
        plugins.register(BrokenManifest())
    assert REGISTRY.get("toyvendor.twice") is None, "a plugin that failed to register leaves no ops behind"


def test_set_num_threads_reaches_the_backend_and_keeps_results():
    x = em.random_uniform((1 << 18,), generator=em.random.Generator("cpu", seed=3))
    try:
        em.set_num_threads(1)
        one = em.sum(x).item()
        em.set_num_threads(2)
        two = em.sum(x).item()
    finally:
        em.set_num_threads(2)
    assert one == two  # pairwise sums are bit-identical for any thread count
    with pytest.raises(ValueError):
        em.set_num_threads(0)


class _FastAdd:
    """A kernel-only provider for `cpu` (like XNNPACK): owns no device, serves `add` at a higher
    priority than ember-cpu, and counts its calls."""

    def __init__(self, manifest):
        self.manifest = manifest
        self.calls = 0
        self.declines = 0
        self.decline_ndim = 99  # inputs with at least this many dims are declined

    @plugins.hookimpl
    def ember_plugin_info(self):
        return plugins.PluginInfo(name="fastadd", version="1", abi=(ABI_MAJOR, ABI_MINOR), manifest=self.manifest)

    @plugins.hookimpl
    def ember_kernels(self, device_type):
        cpu_add = MANAGER.backends["cpu"].kernels("cpu")["add"]

        def add(out, a, b):
            if out.ndim >= self.decline_ndim:
                self.declines += 1
                return NotImplemented
            self.calls += 1
            return cpu_add(out, a, b)

        return {"add": add} if device_type == "cpu" else {}


@pytest.fixture
def fastadd(tmp_path):
    manifest = tmp_path / "fastadd.toml"
    manifest.write_text('[plugin]\npriority = 10\n[kernels.cpu]\nadd = ["float32"]\n')
    provider = _FastAdd(manifest)
    plugins.register(provider)
    yield provider
    plugins.unregister("fastadd")


def test_two_providers_for_one_device_by_priority_and_preference(fastadd, monkeypatch):
    x = em.ones(4)
    assert (x + x).tolist() == [2.0] * 4 and fastadd.calls == 1  # priority 10 beats ember-cpu's 0
    (em.ones(4, dtype=em.float64) + 1.0).tolist()
    assert fastadd.calls == 1  # it claims float32 only: float64 goes to the next provider
    with em.providers(exclude=["fastadd"]):
        x + x
    assert fastadd.calls == 1
    with em.providers(prefer=["cpu"]):
        x + x
    assert fastadd.calls == 1
    x + x
    assert fastadd.calls == 2


def test_plans_made_before_a_plugin_arrives_are_forgotten(tmp_path):
    x = em.ones(4)
    x + x  # plans for add under the configuration's preferences...
    with em.providers(exclude=["rocm"]):  # a setting of its own that changes nothing for cpu tensors
        x + x  # ...and under this block's
        manifest = tmp_path / "fastadd.toml"
        manifest.write_text('[plugin]\npriority = 10\n[kernels.cpu]\nadd = ["float32"]\n')
        provider = _FastAdd(manifest)
        plugins.register(provider)
        try:
            x + x
            assert provider.calls == 1  # the block's plan was made before the plugin came
        finally:
            plugins.unregister("fastadd")
        plugins.register(provider)
    try:
        x + x
        assert provider.calls == 2  # the configuration's too, though the block began before
    finally:
        plugins.unregister("fastadd")


def test_a_declined_call_goes_to_the_next_provider(fastadd):
    fastadd.decline_ndim = 2
    assert (em.ones(3) + em.ones(3)).tolist() == [2.0] * 3 and fastadd.calls == 1
    assert (em.ones((2, 2)) + em.ones((2, 2))).tolist() == [[2.0] * 2] * 2
    assert fastadd.calls == 1 and fastadd.declines == 1  # served by ember-cpu, the next in rank


def test_trace_counts_the_provider_of_every_call(fastadd):
    fastadd.decline_ndim = 2
    x = em.ones(3)
    with em.trace_dispatch() as log:
        x + x
        x + x
        em.ones((2, 2)) + 1.0
        em.mean(x)
    calls = log.providers()
    assert calls["add"] == {"fastadd": 2, "cpu": 1}
    assert calls["mean"] == {"composite": 1} and calls["sum"] == {"cpu": 1}
    x + x  # tracing is off again: nothing is counted
    assert sum(calls["add"].values()) == 3 and log.providers()["add"] == calls["add"]


def test_a_providers_block_entered_every_step_reuses_its_plans():
    """Plan caches key on the preferences object: the same setting must be the same object, or a
    training loop that enters ``providers(...)`` each step re-plans every op and grows the caches."""
    from ember_core import dispatch

    x = em.ones(3)
    sizes = []
    for _ in range(3):
        with em.providers(exclude=["rocm"]):
            x + x
            em.sum(x)
        with em.trace_dispatch():   # a traced block's plans go when it ends
            x * x
        sizes.append(sum(len(cache) for cache in dispatch._plan_caches))
    assert sizes[0] == sizes[1] == sizes[2]
    with em.providers(exclude=["rocm"]):
        first = dispatch.current()
    with em.providers(exclude=["rocm"]):
        assert dispatch.current() is first


def test_provider_preference_from_environment_and_config(fastadd, monkeypatch, tmp_path):
    from ember_core import dispatch

    x = em.ones(4)
    monkeypatch.setenv("EMBER_PROVIDERS", "cpu")
    dispatch._clear()
    x + x
    assert fastadd.calls == 0
    monkeypatch.delenv("EMBER_PROVIDERS")
    config = tmp_path / "ember.toml"
    config.write_text('[dispatch]\nexclude = ["fastadd"]\nfallback = "error"\n')
    monkeypatch.setenv("EMBER_CONFIG", str(config))
    dispatch._clear()
    x + x
    assert fastadd.calls == 0 and dispatch.current().fallback == "error"
    monkeypatch.delenv("EMBER_CONFIG")
    dispatch._clear()
    x + x
    assert fastadd.calls == 1


def test_small_blocks_are_recycled_and_returned_on_empty_cache():
    stats = em.Device("cpu").backend.hooks["ember_memory_stats"]
    em.ones(16) + 1  # warm up: the scalar 1 becomes a cached constant tensor
    em.empty_cache()
    before = stats(em.Device("cpu"))["allocations"]
    for _ in range(100):
        em.ones(16) + 1  # temporaries die at once: their blocks go to the pool, then come back
    during = stats(em.Device("cpu"))["allocations"]
    assert during - before <= 8  # not one allocation per temporary
    em.empty_cache()
    assert stats(em.Device("cpu"))["allocations"] <= before


def test_unregistering_a_backend_releases_its_devices(tmp_path):
    class Counting(Toy):
        name = "counting"
        device_types = ("countdev",)
        freed = 0

        @plugins.hookimpl
        def ember_free(self, device, handle):
            type(self).freed += 1

    backend = plugins.register(Counting())
    x = em.ones(4, device="countdev")
    del x  # pooled, not freed yet
    plugins.unregister(backend.name)
    assert Counting.freed >= 1  # the pool went back through the free hook
    with pytest.raises(em.BackendUnavailableError):
        em.ones(4, device="countdev")


def test_a_device_without_any_kernel_runs_everything_through_the_fallback():
    """Only the device hooks: creation, strided views, writes into views, reductions and printing
    all work by moving bytes with the transfer hooks (no recursion through a missing copy kernel)."""

    class Bare(Toy):
        name = "bare"
        device_types = ("bare",)

        @plugins.hookimpl
        def ember_plugin_info(self):
            return plugins.PluginInfo(name=self.name, version="1", abi=self.abi, device_types=self.device_types)

        @plugins.hookimpl
        def ember_kernels(self, device_type):
            return {}

    backend = plugins.register(Bare())
    try:
        with em.fallback_policy("allow"):
            x = em.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device="bare")
            assert x.mT.contiguous().tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
            x[:, ::2] = em.asarray([[-1.0, -3.0], [-4.0, -6.0]], device="bare")
            assert x.tolist() == [[-1.0, 2.0, -3.0], [-4.0, 5.0, -6.0]]
            assert (x.mT * 2).sum(axis=0).tolist() == [-4.0, -10.0]
            assert "device='bare:0'" in repr(x[1])
            rows = em.asarray([[0, 1], [2, 3], [4, 5]], dtype=em.int8, device="bare")
            em.ops.call("index_put", rows, em.asarray([0, 2], device="bare"), em.zeros((2, 2), dtype=em.int8,
                                                                                       device="bare"))
            assert rows.tolist() == [[0, 0], [2, 3], [0, 0]]  # the rows not written keep their values
        ops = {e["op"] for e in em.fallback_report() if e["device"] == "bare:0"}
        assert {"full", "copy", "multiply", "sum"} <= ops | {"full"}
    finally:
        plugins.unregister(backend.name)


def test_forgetting_a_device_type_drops_the_core_scalars_cached_on_it(toy):
    """A backend reset or unregistered frees its memory: the core's cached 0-d constants on its devices
    must not outlive it (a later kernel would read freed memory)."""
    from ember_core.device import forget_device_types
    from ember_core.ops import families

    x = em.asarray([1.0, 2.0], device="toy")
    with em.fallback_policy("allow"):
        x * 1.5  # caches the scalar 1.5 on toy

    def on_toy() -> list:
        return [k for k in (*families._constants, *families._scalar_operands)
                if any(getattr(part, "type", None) == "toy" for part in k)]

    assert on_toy()
    forget_device_types(("toy",))
    assert not on_toy()
