"""Optimizers and schedules against PyTorch: the same gradients (assigned by hand, so no autograd is
involved) must give the same parameters step after step; then a few full training steps of one
model from the same initial weights."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember_core as em
from ember_core import nn, optim

torch = pytest.importorskip("torch")


def _grads(step, shapes):
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s) for s in shapes]


OPTIMIZERS = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.5, "dampening": 0.3, "maximize": True}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.01, "betas": (0.8, 0.99), "weight_decay": 0.1, "amsgrad": True}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1, "maximize": True}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.3, "eps": 1e-6}),
    ("AdamW", {"lr": 0.01, "maximize": True}),
]


@pytest.mark.parametrize(("name", "kwargs"), OPTIMIZERS)
def test_optimizer_trajectory_matches_torch(name, kwargs):
    shapes = [(3, 4), (4,)]
    init = [np.random.default_rng(i).standard_normal(s) for i, s in enumerate(shapes)]
    ours = [nn.Parameter(em.asarray(a)) for a in init]
    theirs = [torch.from_numpy(a.copy()).requires_grad_() for a in init]
    opt = getattr(optim, name)(ours, **kwargs)
    ref = getattr(torch.optim, name)(theirs, **kwargs)
    for step in range(5):
        for p, tp, g in zip(ours, theirs, _grads(step, shapes)):
            p.grad, tp.grad = em.asarray(g), torch.from_numpy(g)
        opt.step()
        ref.step()
        for p, tp in zip(ours, theirs):
            np.testing.assert_allclose(np.asarray(p), tp.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_zero_grad_state_dict_and_param_groups():
    a, b = nn.Parameter(em.ones(2)), nn.Parameter(em.ones(3))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    a.grad, b.grad = em.ones(2), em.ones(3)
    opt.step()
    state = opt.state_dict()
    assert state["param_groups"][1]["params"] == [1] and 0 in state["state"]
    opt.zero_grad(set_to_none=False)
    assert a.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert a.grad is None and b.grad is None

    fresh = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.1}], lr=0.1, momentum=0.9)
    fresh.load_state_dict(state)
    assert fresh.param_groups[1]["lr"] == 0.5
    np.testing.assert_array_equal(np.asarray(fresh.state[a]["momentum_buffer"]),
                                  np.asarray(opt.state[a]["momentum_buffer"]))


def test_optimizers_reject_bad_arguments():
    p = nn.Parameter(em.ones(2))
    with pytest.raises(ValueError):
        optim.SGD([p], lr=-1)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="empty"):
        optim.Adam([])
    with pytest.raises(ValueError, match="does not require grad"):
        optim.SGD([em.ones(2)], lr=0.1)
    with pytest.raises(ValueError, match="more than one group"):
        optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(TypeError, match="unknown hyperparameters"):
        optim.SGD([{"params": [p], "lrr": 1}], lr=0.1)


@pytest.mark.parametrize(("ours", "theirs", "kwargs"), [
    (optim.StepLR, torch.optim.lr_scheduler.StepLR, {"step_size": 3, "gamma": 0.5}),
    (optim.CosineAnnealingLR, torch.optim.lr_scheduler.CosineAnnealingLR, {"T_max": 7, "eta_min": 0.01}),
])
def test_schedules_match_torch(ours, theirs, kwargs):
    opt = optim.SGD([nn.Parameter(em.ones(1))], lr=0.2)
    ref_opt = torch.optim.SGD([torch.ones(1, requires_grad=True)], lr=0.2)
    schedule, ref = ours(opt, **kwargs), theirs(ref_opt, **kwargs)
    for _ in range(10):
        assert schedule.get_last_lr() == pytest.approx(ref.get_last_lr(), rel=1e-12)
        ref_opt.step()
        schedule.step()
        ref.step()


def test_cosine_schedule_reaches_eta_min():
    opt = optim.Adam([nn.Parameter(em.ones(1))], lr=1.0)
    schedule = optim.CosineAnnealingLR(opt, T_max=4)
    for _ in range(4):
        schedule.step()
    assert schedule.get_last_lr()[0] == pytest.approx(0.0, abs=1e-15)
    assert optim.CosineAnnealingLR(opt, T_max=4).lr_at(1.0, 2) == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))


@pytest.mark.parametrize(("name", "kwargs"), [("SGD", {"lr": 0.05, "momentum": 0.9}), ("Adam", {"lr": 0.01})])
def test_training_steps_match_torch_from_the_same_weights(name, kwargs):
    """A small CNN (conv, relu, max-pool, linear, cross-entropy), float64, four steps."""
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                 torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 5)).double()
    ours = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 5)).to(em.float64)
    ours.load_state_dict({k: em.asarray(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    opt, ref = getattr(optim, name)(ours.parameters(), **kwargs), getattr(torch.optim, name)(theirs.parameters(),
                                                                                              **kwargs)
    loss_fn, ref_loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1), torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x, y = rng.standard_normal((8, 1, 6, 6)), rng.integers(0, 5, 8)
        loss = loss_fn(ours(em.asarray(x)), em.asarray(y))
        ref_loss = ref_loss_fn(theirs(torch.from_numpy(x)), torch.from_numpy(y))
        assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-10)
        opt.zero_grad()
        ref.zero_grad()
        loss.backward()
        ref_loss.backward()
        opt.step()
        ref.step()
    for (name_, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(np.asarray(p), tp.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=name_)
