"""em.save / em.load and pickle: exact round trips of every dtype, sharing, devices, mmap, atomic saves,
PyTorch interoperability through the safetensors package, and a checkpoint that resumes bit for bit."""

from __future__ import annotations

import copy
import math
import os
import pickle
import warnings
from collections import OrderedDict

import numpy as np
import pytest
from serialization_files import raw_values, read_header, rewrite_header, sample

import ember_core as em
from ember_core import nn, optim
from ember_core.serialization import pickling


@pytest.mark.parametrize("dtype", em.dtypes.ALL_DTYPES, ids=lambda d: d.name)
def test_every_dtype_round_trips_exactly(tmp_path, device, dtype):
    t = sample(dtype).to_device(device)
    em.save({"t": t, "row": t[1]}, tmp_path / "f.safetensors")
    back = em.load(tmp_path / "f.safetensors")
    assert back["t"].dtype is dtype and back["t"].device is device
    assert raw_values(back["t"]).tobytes() == raw_values(t).tobytes()
    assert raw_values(back["row"]).tobytes() == raw_values(t[1]).tobytes()


def test_structure_round_trips(tmp_path):
    obj = {"ints": [1, -2**62, 0], "floats": (0.1, -0.0, math.inf, -math.inf), "none": None, "text": "é",
           "flag": True, 3: "int key", (1, 2): "tuple key", "c": 1 - 2j, "dtype": em.bfloat16,
           "device": em.as_device("cpu"), "ordered": OrderedDict(b=1, a=2), "nested": [{"x": [[]]}]}
    em.save(obj, tmp_path / "f")
    back = em.load(tmp_path / "f")
    assert back == obj and type(back["ordered"]) is OrderedDict and type(back["floats"]) is tuple
    assert math.copysign(1, back["floats"][1]) == -1
    em.save(math.nan, tmp_path / "g")
    assert math.isnan(em.load(tmp_path / "g"))
    em.save([np.int64(2**62), np.float32(0.1), np.bool_(True)], tmp_path / "g")
    assert em.load(tmp_path / "g") == [2**62, float(np.float32(0.1)), True]


def test_unsupported_objects_are_refused_before_writing(tmp_path):
    with pytest.raises(em.NotSerializableError, match=r"model\.f.*set"):
        em.save({"model": {"f": {1, 2}}}, tmp_path / "f")
    x = em.ones(2).requires_grad_()
    with pytest.raises(em.NotSerializableError, match=r"detach"):
        em.save({"y": x * 2}, tmp_path / "f")
    assert not os.listdir(tmp_path)


def test_shared_storage_is_stored_once_and_restored_shared(tmp_path, device):
    base = em.arange(12, dtype=em.float32, device=device).reshape(3, 4)
    obj = {"base": base, "col": base[:, 1], "t": base.T, "tied": [base, base]}
    em.save(obj, tmp_path / "f")
    header, data = read_header(tmp_path / "f")
    assert len(data) == base.nbytes and set(header) == {"__metadata__", "base"}
    back = em.load(tmp_path / "f")
    assert back["tied"][0] is back["tied"][1]
    storage = back["base"]._storage
    assert all(v._storage is storage for v in (back["col"], back["t"]))
    back["base"][0, 1] = 100.0
    assert float(back["col"][0]) == 100.0 and float(back["t"][1, 0]) == 100.0
    np.testing.assert_array_equal(np.asarray(back["col"])[1:], [5, 9])


def test_requires_grad_and_parameters_come_back(tmp_path):
    model = nn.Linear(3, 2)
    em.save({"w": model.weight, "plain": em.ones(2)}, tmp_path / "f")
    back = em.load(tmp_path / "f")
    assert isinstance(back["w"], nn.Parameter) and back["w"].requires_grad
    assert not isinstance(back["plain"], nn.Parameter) and not back["plain"].requires_grad


def test_device_argument_moves_everything(tmp_path, device):
    em.save({"a": em.ones(3), "v": em.arange(6).reshape(2, 3)[:, 1]}, tmp_path / "f")
    back = em.load(tmp_path / "f", device=device)
    assert back["a"].device is device and back["v"].device is device
    assert back["v"].tolist() == [1, 4]


def test_an_unavailable_saved_device_loads_on_cpu_with_a_warning(tmp_path):
    em.save({"a": em.ones(3)}, tmp_path / "f")

    def elsewhere(header):
        header["structure"]["$dict"][0][1]["device"] = "nosuchbackend:3"

    rewrite_header(tmp_path / "f", elsewhere)
    with pytest.warns(UserWarning, match=r"nosuchbackend:3 are loaded onto cpu"):
        back = em.load(tmp_path / "f")
    assert back["a"].device == "cpu" and back["a"].tolist() == [1, 1, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert em.load(tmp_path / "f", device="cpu")["a"].device == "cpu"  # asked for: no warning
    with pytest.warns(UserWarning, match="loaded onto cpu"):
        assert pickling.rebuild_storage("nosuchbackend", b"1234").device == "cpu"


def test_a_backends_serialize_hook_is_used_when_it_has_one(tmp_path, monkeypatch):
    device = em.as_device("vulkan:0")
    t = em.arange(5, dtype=em.int32, device=device)
    calls = []

    def serialize(dev, handle, nbytes):
        calls.append(nbytes)
        out = bytearray(nbytes)
        dev.backend.hooks["ember_copy_to_host"](dev, handle, 0, memoryview(out))
        return bytes(out)

    monkeypatch.setitem(device.backend.hooks, "ember_serialize_handle", serialize)
    em.save({"t": t}, tmp_path / "f")
    assert calls == [20] and em.load(tmp_path / "f")["t"].tolist() == [0, 1, 2, 3, 4]


def test_mmap_load_aliases_the_mapping_copy_on_write(tmp_path):
    t = em.arange(1000, dtype=em.float64)
    em.save({"t": t, "h": em.ones(3, dtype=em.float16)}, tmp_path / "f")
    before = (tmp_path / "f").read_bytes()
    aliased, copied = em.load(tmp_path / "f", mmap=True), em.load(tmp_path / "f", mmap=False)
    assert aliased["t"].tolist() == t.tolist() and aliased["h"].tolist() == [1, 1, 1]
    aliased["t"][0] = -1.0  # private mapping: the write stays in this process
    assert (tmp_path / "f").read_bytes() == before
    with open(tmp_path / "f", "r+b") as f:  # rewritten in place: the mapping's unwritten pages show it
        f.seek(len(before) - 6 - 8)  # the last element of "t" (the float64 entry comes first), pages after [0]'s
        f.write(np.float64(42.0).tobytes())
    assert float(aliased["t"][999]) == 42.0 and float(copied["t"][999]) == 999.0
    em.save({"t": em.zeros(2)}, tmp_path / "f")  # replacing the file (rename) keeps the mapping valid
    assert float(aliased["t"][998]) == 998.0 and float(aliased["t"][0]) == -1.0


def test_a_save_keeps_permissions_and_names_like_the_header_key(tmp_path):
    path = tmp_path / "f"
    em.save({"__metadata__": em.ones(2), "x": "y"}, path)
    assert em.load(path)["__metadata__"].tolist() == [1, 1]
    umask = os.umask(0o22)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    path.chmod(0o640)
    em.save({}, path)
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    em.save({"a": em.ones(2)}, tmp_path / "ckpt")
    before = (tmp_path / "ckpt").read_bytes()

    def crash(_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        em.save({"a": em.zeros(2)}, tmp_path / "ckpt")
    assert (tmp_path / "ckpt").read_bytes() == before and os.listdir(tmp_path) == ["ckpt"]


# ---- pickle ---------------------------------------------------------------------------------------

def test_pickle_round_trips_tensors_parameters_views_and_grads(device):
    base = em.arange(6, dtype=em.float32, device=device).reshape(2, 3)
    p = nn.Parameter(em.ones(2, device=device))
    p.grad = em.full((2,), 3.0, device=device)
    a, view, q = pickle.loads(pickle.dumps((base, base[:, 1:], p)))
    assert a.device is device and a.tolist() == base.tolist() and view.tolist() == [[1, 2], [4, 5]]
    assert view._storage is a._storage and isinstance(q, nn.Parameter) and q.requires_grad
    assert q.grad.tolist() == [3, 3] and q._storage is not p._storage


def test_pickle_refuses_non_leaves():
    x = em.ones(2).requires_grad_()
    with pytest.raises(em.NotSerializableError, match=r"detach\(\)"):
        pickle.dumps(x * 2)


def test_pickle_of_a_module_and_its_optimizer_keeps_them_connected(device):
    model = nn.Linear(3, 2).to(device)
    opt = optim.Adam(model.parameters(), lr=0.1)
    model(em.ones((4, 3), device=device)).sum().backward()
    opt.step()
    model2, opt2 = pickle.loads(pickle.dumps((model, opt)))
    assert opt2.param_groups[0]["params"][0] is model2.weight
    assert set(opt2.state) == {model2.weight, model2.bias}
    np.testing.assert_array_equal(np.asarray(model2.weight), np.asarray(model.weight))
    assert copy.deepcopy(model2).weight.tolist() == model2.weight.tolist()


# ---- state dicts and checkpoints ------------------------------------------------------------------

def test_state_dicts_round_trip_through_a_file(tmp_path, device):
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).to(device)
    em.save(model.state_dict(), tmp_path / "m")
    fresh = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).to(device)
    fresh.load_state_dict(em.load(tmp_path / "m"), strict=True)
    for (k, v), w in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert raw_values(v).tobytes() == raw_values(w).tobytes(), k
    with pytest.raises(KeyError, match="missing keys"):
        nn.Linear(4, 3).to(device).load_state_dict({"weight": em.ones((3, 4))}, strict=True)


def _train(model, opt, sched, epochs):
    x = em.asarray(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
    y = em.asarray(np.cos(np.arange(16.0, dtype=np.float32)).reshape(8, 2))
    for _ in range(epochs):
        for _ in range(3):
            opt.zero_grad()
            out = model(nn.functional.dropout(x, 0.3))  # draws from the default generator
            ((out - y) ** 2).mean().backward()
            opt.step()
        sched.step()


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: em.Tensor) -> em.Tensor:
        return self.out(em.tanh(self.hidden(x)))


def _fresh():
    em.manual_seed(1234)
    model = _Net()  # float32, where ember-cpu and xnnpack both serve linear and round differently
    opt = optim.Adam(model.parameters(), lr=0.05)
    return model, opt, optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


def test_a_checkpoint_resumes_training_bit_for_bit(tmp_path):
    model, opt, sched = _fresh()
    _train(model, opt, sched, 3)
    em.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
             "rng": em.get_rng_state(), "epoch": 3}, tmp_path / "ckpt.safetensors")
    _train(model, opt, sched, 2)
    uninterrupted = [raw_values(v).tobytes() for v in model.state_dict().values()]

    model, opt, sched = _fresh()
    em.manual_seed(999)  # whatever happened since, the checkpoint restores it
    ckpt = em.load(tmp_path / "ckpt.safetensors")
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    em.set_rng_state(ckpt["rng"])
    _train(model, opt, sched, 2)
    assert ckpt["epoch"] == 3 and sched.get_last_lr() == [0.05 * 0.5 ** 2]
    assert [raw_values(v).tobytes() for v in model.state_dict().values()] == uninterrupted
