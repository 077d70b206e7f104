"""DLPack for memory a backend owns (the core's capsule machinery, ember_core.interop) and the
optional memory hooks: checked with a toy backend whose "device memory" is host memory it exports
as kDLCPU, so PyTorch's CPU build consumes ember's hand-built capsules and reads them back."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from toy_backend import Toy

import ember_core as em
from ember_core import interop, plugins

torch = pytest.importorskip("torch")


class Exporting(Toy):
    """Toy memory exported through the DLPack hooks (numpy arrays are the handles)."""

    name = "dlpacktoy"
    device_types = ("dlpacktoy",)
    streams: list = []
    emptied: list = []

    @plugins.hookimpl
    def ember_dlpack_export(self, device, handle, byte_offset, stream):
        self.streams.append(stream)
        return handle.ctypes.data + byte_offset, (1, 0)

    @plugins.hookimpl
    def ember_empty_cache(self, device):
        self.emptied.append(device)


@pytest.fixture
def exporting():
    backend = plugins.register(Exporting())
    Exporting.streams.clear()
    Exporting.emptied.clear()
    yield em.Device("dlpacktoy")
    plugins.unregister(backend.name)


def _on(device, values, dtype="float32"):
    with em.fallback_policy("allow"):
        return em.asarray(np.asarray(values), dtype=dtype, device=device)


@pytest.mark.parametrize(("dtype", "torch_dtype"), [
    ("float32", torch.float32), ("float64", torch.float64), ("int64", torch.int64), ("int32", torch.int32),
    ("bool", torch.bool), ("uint8", torch.uint8), ("float16", torch.float16), ("bfloat16", torch.bfloat16),
    ("complex64", torch.complex64), ("complex128", torch.complex128),
])
def test_torch_reads_device_memory_through_embers_capsule(exporting, dtype, torch_dtype):
    values = np.arange(12.0).reshape(3, 4) - (0 if dtype in ("bool", "uint8") else 4)
    values = values % 2 if dtype == "bool" else values
    x = _on(exporting, values, dtype)
    got = torch.from_dlpack(x)  # versioned capsule: torch asks for max_version (1, 0)
    assert got.dtype == torch_dtype and got.shape == (3, 4)
    expected = torch.from_numpy(np.asarray(values)).to(torch_dtype)
    assert torch.equal(got, expected)


def test_views_keep_their_strides_and_offset_and_memory_is_shared(exporting):
    x = _on(exporting, np.arange(12.0).reshape(3, 4))
    view = x[1:, ::2].mT  # offset 4, strides (2, 4)
    got = torch.from_dlpack(view)
    assert got.shape == (2, 2) and got.stride() == (2, 4)
    assert got.tolist() == [[4.0, 8.0], [6.0, 10.0]]
    got[0, 0] = -1.0  # the same memory
    with em.fallback_policy("allow"):
        assert x[1, 0].item() == -1.0
    legacy = torch.from_dlpack(x.__dlpack__())  # no max_version: the legacy "dltensor" capsule
    assert legacy.tolist() == x.tolist()
    zero_d = torch.from_dlpack(x[2, 3])
    assert zero_d.shape == () and zero_d.item() == 11.0


def test_the_capsule_keeps_the_tensor_alive_until_the_consumer_releases_it(exporting):
    x = _on(exporting, np.full(1000, 2.5))
    gc.collect()
    before = len(interop._exported)
    got = torch.from_dlpack(x)
    del x
    gc.collect()
    assert len(interop._exported) == before + 1 and (got == 2.5).all()
    del got  # torch calls the deleter
    gc.collect()
    assert len(interop._exported) == before
    capsule = _on(exporting, [1.0]).__dlpack__()  # never consumed: its destructor releases it
    assert len(interop._exported) == before + 1
    del capsule
    gc.collect()
    assert len(interop._exported) == before


def test_the_consumers_stream_reaches_the_backend_and_device_arguments_are_checked(exporting):
    x = _on(exporting, [1.0, 2.0])
    x.__dlpack__(stream=7)
    x.__dlpack__()
    assert Exporting.streams[-2:] == [7, None]
    assert x.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError, match=r"on DLPack device \(1, 0\).*\(2, 0\)"):
        x.__dlpack__(dl_device=(2, 0))
    with em.fallback_policy("allow"):
        copied = torch.from_dlpack(x.__dlpack__(copy=True))
    copied[0] = 9.0
    with em.fallback_policy("allow"):
        assert x[0].item() == 1.0


def test_a_backend_without_the_export_hook_says_so(toy):
    x = _on("toy", [1.0])
    for attempt in (x.__dlpack__, x.__dlpack_device__):
        with pytest.raises(em.DeviceError, match="ember-toy does not"):
            attempt()


def test_empty_cache_reaches_the_backends_of_devices_in_use(exporting):
    _on(exporting, [1.0])
    em.empty_cache()
    assert Exporting.emptied == [exporting]


def test_a_cuda_producer_without_a_usable_cuda_backend_gets_the_reason(monkeypatch):
    class CudaTensor:
        def __dlpack__(self, **kwargs):
            raise AssertionError("must not be asked for its capsule")

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    try:
        em.Device("cuda").backend  # noqa: B018
        pytest.skip("a cuda device is usable here")
    except em.BackendUnavailableError:
        pass
    with pytest.raises(em.BackendUnavailableError, match="cuda"):
        em.from_dlpack(CudaTensor())
