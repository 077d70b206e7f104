"""copy.deepcopy of tensors, parameters and modules gives independent memory on the tensor's own
device (never a second owner of one device handle); copy.copy shares memory, as PyTorch's does;
pickling refuses with a typed error until a save/load API exists.  ``device``: cpu and vulkan:0
(conftest.py)."""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest

import ember_core as em
from ember_core import nn, optim
from ember_core.tensor import Storage


def values(t):
    return np.asarray(t.tolist())


def test_a_deep_copy_owns_new_memory_on_the_same_device(device):
    x = em.asarray(np.arange(6.0).reshape(2, 3), dtype=em.float32, device=device)
    y = copy.deepcopy(x)
    assert (y.device, y.dtype, y.shape, y.strides) == (x.device, x.dtype, x.shape, x.strides)
    assert y.handle is not x.handle and y.handle != x.handle
    np.testing.assert_array_equal(values(y), np.arange(6.0).reshape(2, 3))
    y[0, 0] = 100.0
    x[1, 2] = -1.0
    np.testing.assert_array_equal(values(x), [[0.0, 1.0, 2.0], [3.0, 4.0, -1.0]])
    np.testing.assert_array_equal(values(y), [[100.0, 1.0, 2.0], [3.0, 4.0, 5.0]])


def test_freeing_an_original_and_its_copy_leaves_no_shared_block(device):
    """The fuzzer's case: a copy that kept the original's handle freed it a second time, so the pool
    handed one block to two later tensors."""
    x = em.ones(4, device=device)
    y = copy.deepcopy(x)
    del x, y
    a = em.zeros(4, device=device)
    b = em.zeros(4, device=device)
    assert a.handle != b.handle
    a[:] = 5.0
    assert b.tolist() == [0.0] * 4


def test_tensors_sharing_memory_share_their_copy(device):
    """One deepcopy call copies a storage once: a tensor and its views copied together stay
    aliased among themselves (not with the originals); a view copied alone keeps its layout."""
    base = em.arange(8.0, device=device)
    view = base[2:7:2]
    base2, view2 = copy.deepcopy((base, view))
    assert (view2.offset, view2.strides, view2.shape) == (view.offset, view.strides, view.shape)
    view2[0] = 100.0
    assert base2[2].item() == 100.0 and base[2].item() == 2.0
    alone = copy.deepcopy(view)
    assert alone.tolist() == [2.0, 4.0, 6.0] and alone.offset == view.offset
    alone[1] = -4.0
    assert view.tolist() == [2.0, 4.0, 6.0]


def test_requires_grad_and_grad_are_copied_and_independent(device):
    x = em.asarray([1.0, 2.0, 3.0], device=device).requires_grad_()
    (x * x).sum().backward()
    y = copy.deepcopy(x)
    assert y.requires_grad and y.is_leaf and y.grad.tolist() == [2.0, 4.0, 6.0]
    assert y.grad.handle != x.grad.handle
    (y * 3.0).sum().backward()
    assert y.grad.tolist() == [5.0, 7.0, 9.0] and x.grad.tolist() == [2.0, 4.0, 6.0]
    frozen = copy.deepcopy(em.ones(2, device=device))
    assert not frozen.requires_grad and frozen.grad is None


def test_a_non_leaf_is_refused_as_pytorch_does(device):
    x = em.ones(3, device=device).requires_grad_()
    with pytest.raises(RuntimeError, match=r"only leaves can be deep-copied.*detach"):
        copy.deepcopy(x * 2.0)
    assert copy.deepcopy((x * 2.0).detach()).tolist() == [2.0] * 3


def test_a_shallow_copy_shares_memory_as_pytorch_does(device):
    x = em.ones(3, device=device).requires_grad_()
    y = copy.copy(x)
    assert y is not x and y.requires_grad and y.is_leaf and y.handle is x.handle
    with em.no_grad():
        y[0] = 7.0
    assert x[0].item() == 7.0


def test_a_module_copy_trains_on_its_own_parameters(device):
    """deepcopy of a module: its parameters stay Parameters, with memory of their own, buffers
    included; an optimizer over the copy leaves the original as it was."""
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).to(device)
    clone = copy.deepcopy(model)
    before = {k: values(v) for k, v in model.state_dict().items()}
    pairs = list(zip(model.parameters(), clone.parameters()))
    assert len(pairs) == 4
    for original, copied in pairs:
        assert isinstance(copied, nn.Parameter) and copied.requires_grad and copied.handle != original.handle
        assert copied.device == device
    opt = optim.SGD(clone.parameters(), lr=0.5)
    x = em.asarray(np.random.default_rng(1).standard_normal((8, 4)), dtype=em.float32, device=device)
    y = clone(x)
    (y * y).sum().backward()
    opt.step()
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(values(tensor), before[name], err_msg=name)
    assert all(p.grad is None for p in model.parameters())
    moved = [name for name, t in clone.state_dict().items() if not np.array_equal(values(t), before[name])]
    assert {"0.weight", "1.weight", "1.running_mean", "1.running_var"} <= set(moved)


def test_a_shallow_copy_of_a_parameter_is_a_parameter():
    p = nn.Parameter(em.ones(2))
    assert isinstance(copy.copy(p), nn.Parameter) and isinstance(copy.deepcopy(p), nn.Parameter)
    assert not isinstance(copy.deepcopy(em.ones(2)), nn.Parameter)


def test_storage_is_never_duplicated(device):
    """copy.copy of a storage (through its pickling) makes a new allocation, never a second owner."""
    storage = em.ones(2, device=device)._storage
    copied = copy.copy(storage)
    assert copied.handle is not storage.handle and copied.device is device and copied.nbytes == storage.nbytes


def test_a_storage_whose_init_never_ran_is_collected_quietly(monkeypatch):
    raised = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    half = object.__new__(Storage)
    del half
    assert raised == []
