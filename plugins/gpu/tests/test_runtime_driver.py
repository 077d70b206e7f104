"""The driver binding: one cdef from the vendor table, checked calls, errors that name the vendor's
function, error name and meaning; and what discovery reports when the driver cannot be used."""

from __future__ import annotations

import dataclasses
import os

import pytest
from ember_gpu.driver import SIGNATURES, DriverUnavailable, cdef_for, open_driver
from ember_gpu.errors import DeviceLostError, DriverError, GpuError, GpuOutOfMemoryError
from ember_gpu.fake import FakeGpu
from ember_gpu.runtime import Runtime
from testgpu_vendor import TEST_VENDOR

from ember_core.errors import BackendUnavailableError, EmberError


def test_the_cdef_declares_every_function_under_the_vendor_symbol():
    cdef = cdef_for(TEST_VENDOR)
    for name in SIGNATURES:
        assert f"int tg_{name}(" in cdef
    partial = dataclasses.replace(TEST_VENDOR, symbols={"init": "tg_init"})
    with pytest.raises(ValueError, match="names no symbol for"):
        cdef_for(partial)


def test_a_missing_driver_library_is_a_reason_naming_it_and_the_driver_needed():
    with pytest.raises(DriverUnavailable) as caught:
        open_driver(TEST_VENDOR)
    reason = str(caught.value)
    assert "libember-testgpu-driver.so.1" in reason and "TG470 or newer" in reason and "install it" in reason
    runtime = Runtime(TEST_VENDOR, "nothing")
    assert runtime.discover().count == 0 and runtime.discover().reason == reason
    with pytest.raises(BackendUnavailableError, match="TG470 or newer"):
        runtime.device(0)


@pytest.mark.parametrize(("status", "words"), [
    (34, "stub library"), (100, "check tg-smi"), (803, "reboot"), (804, "remove tg-compat"),
])
def test_the_driver_failing_to_initialise_is_a_reason_with_the_vendors_meaning(fake, status, words):
    fake.fail("init", status)
    found = Runtime(TEST_VENDOR, "nothing", opener=fake.open).discover()
    assert found.count == 0
    assert TEST_VENDOR.errors[status].name in found.reason and words in found.reason


def test_a_driver_older_than_the_kernels_need_is_a_reason():
    fake = FakeGpu(TEST_VENDOR, driver_version=7010)
    found = Runtime(TEST_VENDOR, "nothing", opener=fake.open).discover()
    assert found.count == 0 and "7.1" in found.reason and "TG470 or newer" in found.reason
    assert fake.count("device_get_count") == 0  # nothing past the version check


def test_a_driver_lacking_a_symbol_is_reported_as_too_old(fake):
    class Old:
        def __getattr__(self, symbol):
            if symbol == "tg_mem_alloc_async":
                raise AttributeError(symbol)
            return getattr(fake.lib, symbol)

    found = Runtime(TEST_VENDOR, "nothing", opener=lambda v: type(fake.open(v))(v, Old(), fake.ffi)).discover()
    assert found.count == 0 and "lacks tg_mem_alloc_async" in found.reason and "TG470" in found.reason


def test_no_device_and_devices_too_old_are_reasons():
    empty = FakeGpu(TEST_VENDOR, devices=0)
    found = Runtime(TEST_VENDOR, "nothing", opener=empty.open).discover()
    assert found.count == 0 and "sees no GPU" in found.reason and "check tg-smi" in found.reason
    old = FakeGpu(TEST_VENDOR, compute_capability=(2, 1), name="Relic 9000")
    found = Runtime(TEST_VENDOR, "nothing", opener=old.open).discover()
    assert found.count == 0 and "Relic 9000" in found.reason and "2.1, older than the 3.0" in found.reason
    assert "TESTGPU_VISIBLE_DEVICES" in found.reason


def test_one_old_device_among_usable_ones_keeps_the_indices_and_refuses_itself(fake):
    fake.device_attributes[1]["compute_capability_major"] = 2
    runtime = Runtime(TEST_VENDOR, "nothing", opener=fake.open)
    found = runtime.discover()
    assert found.count == 2 and found.reason is None and set(found.unusable) == {1}
    assert runtime.device(0).index == 0
    with pytest.raises(BackendUnavailableError, match=r"testgpu:1 .* older than"):
        runtime.device(1)


def test_discovery_opens_the_driver_once_and_nothing_before_it_is_asked(fake):
    runtime = Runtime(TEST_VENDOR, "nothing", opener=fake.open)
    assert fake.opened == 0 and fake.calls == []
    runtime.discover()
    runtime.discover()
    assert fake.opened == 1 and fake.count("init") == 1


def test_an_unforeseen_driver_failure_during_discovery_is_a_reason(fake):
    def explode(vendor):
        raise OSError("the driver segfaulted... not quite")

    assert "segfaulted" in Runtime(TEST_VENDOR, "nothing", opener=explode).discover().reason


@pytest.mark.parametrize(("status", "kind"), [
    (1, DriverError), (2, GpuOutOfMemoryError), (700, DeviceLostError), (719, DeviceLostError), (999, DriverError),
])
def test_failed_calls_raise_typed_errors_naming_function_code_and_meaning(fake, status, kind):
    driver = fake.open(TEST_VENDOR)
    driver.bind_all()
    fake.fail("stream_synchronize", status)
    with pytest.raises(kind) as caught:
        driver.call("stream_synchronize", driver.ffi.NULL)
    error = caught.value
    assert isinstance(error, GpuError) and isinstance(error, EmberError)
    assert error.status == status and error.function == "tg_stream_synchronize"
    message = str(error)
    assert "ember-testgpu: tg_stream_synchronize failed" in message and f"({status})" in message
    known = TEST_VENDOR.errors.get(status)
    if known is not None:
        assert known.name in message and known.meaning in message
    else:
        assert "unknown error" in message
    assert isinstance(error, MemoryError) == (status == 2)


def test_fork_after_initialisation_leaves_the_child_without_devices_and_says_use_spawn(runtime):
    runtime.device(0)
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        found = runtime.discover()
        ok = found.count == 0 and "spawn" in found.reason and not runtime.devices
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert runtime.discover().count == 2  # the parent is untouched
