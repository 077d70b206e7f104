"""Training benchmarks, side by side with PyTorch in the same process, on the CPU or a GPU.

Run: ``python bench/bench_train.py [--device cuda] [--threads N] [--rounds R]`` (needs ``torch``,
built for CUDA for ``--device cuda``; the demo epoch also needs scikit-learn).  Each case is
measured alternately for ember and PyTorch, keeping each framework's best time (noise on a shared
machine only ever adds time); on a GPU every timed batch ends with each framework's synchronize.
It prints the ratio ember / PyTorch (lower is better) next to the target for the device (issue 26's
on cuda; on cpu the MLP's 1.5 and the chain's 1.0):

* one SGD training step of an MLP 784-256-256-10 at batch 128; the same with momentum, and that
  optimizer's step alone (one fused ``sgd_step`` per parameter group), for information;
* BatchNorm2d and LayerNorm forward + backward in training, two sizes each, and GroupNorm (its forward
  alone too), for information;
* ten chained small elementwise ops on a tensor that requires grad (graph recording), and the same
  ten ops followed by backward;
* one epoch of ``ember demo``'s CNN on the digits (45 Adam steps at batch 32);
* one SGD step of a small ResNet-style CNN (batch norm, stride-2 and 1x1 convolutions).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from bench_core import timeit

import ember_core as em
from ember_core import nn, optim


@dataclass(frozen=True)
class Where:
    """The device both frameworks run on, and how each puts data there and waits for it."""

    device: str  # "cpu" or "cuda"

    def ours(self, a: np.ndarray) -> em.Tensor:
        return em.asarray(a, device=self.device)

    def theirs(self, a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(self.device)

    def sync(self, framework: str) -> Callable[[], object]:
        if self.device == "cpu":
            return lambda: None
        if framework == "torch":
            return torch.cuda.synchronize
        where = em.as_device(self.device)
        return functools.partial(where.backend.hooks["ember_synchronize"], where)


ON = Where("cpu")  # set by main()


def same_weights(ours: nn.Module, theirs: torch.nn.Module) -> None:
    """PyTorch's initial weights copied into ours, both models then moved to the device."""
    ours.load_state_dict({k: em.asarray(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    ours.to(ON.device)
    theirs.to(ON.device)


def mlp(momentum: float) -> tuple[nn.Module, torch.nn.Module, optim.SGD, torch.optim.SGD]:
    """The MLP in both frameworks with the same weights, and SGD (lr 0.01) for each."""
    theirs = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                 torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ours = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    same_weights(ours, theirs)
    return (ours, theirs, optim.SGD(ours.parameters(), lr=0.01, momentum=momentum),
            torch.optim.SGD(theirs.parameters(), lr=0.01, momentum=momentum))


def mlp_step(momentum: float) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((128, 784)).astype(np.float32), rng.integers(0, 10, 128)
    ours, theirs, opt, topt = mlp(momentum)
    ex, ey, tx, ty = ON.ours(x), ON.ours(y), ON.theirs(x), ON.theirs(y)
    loss_fn, tloss_fn = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()

    def ember_step() -> None:
        loss = loss_fn(ours(ex), ey)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def torch_step() -> None:
        loss = tloss_fn(theirs(tx), ty)
        topt.zero_grad()
        loss.backward()
        topt.step()

    return {"ember": ember_step, "torch": torch_step}


def sgd_update(momentum: float) -> dict[str, Callable[[], object]]:
    """optimizer.step() alone, on gradients set once (momentum buffers then exist from the warm-up)."""
    ours, theirs, opt, topt = mlp(momentum)
    rng = np.random.default_rng(1)
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        g = rng.standard_normal(tuple(tp.shape)).astype(np.float32)
        p.grad, tp.grad = ON.ours(g), ON.theirs(g)
    return {"ember": opt.step, "torch": topt.step}


def norm_step(layer: str, shape: tuple[int, ...], *args: int, backward: bool = True) -> dict[str, Callable[[], object]]:
    """A normalization layer in training, forward and backward against a random gradient, or its
    forward alone on an input that needs no gradient (both fused: ember's batch_norm_train /
    layer_norm / group_norm and their gradient kernels, PyTorch's native ones)."""
    rng = np.random.default_rng(0)
    data, grad = rng.random(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
    ours, theirs = getattr(nn, layer)(*args), getattr(torch.nn, layer)(*args)
    same_weights(ours, theirs)
    if not backward:
        ex, tx = ON.ours(data), ON.theirs(data)
        return {"ember": lambda: ours(ex), "torch": lambda: theirs(tx)}
    ex, tx = ON.ours(data).requires_grad_(), ON.theirs(data).requires_grad_()
    eg, tg = ON.ours(grad), ON.theirs(grad)
    return {"ember": lambda: ours(ex).backward(eg), "torch": lambda: theirs(tx).backward(tg)}


def _ten_ops(x: object, ns: object) -> object:
    y = x * 1.5
    y = y + x
    y = ns.sin(y)
    y = y * x
    y = ns.exp(y)
    y = y - x
    y = ns.tanh(y)
    y = y * 0.5
    y = y + 1.0
    return -y


def chained_ops(backward: bool) -> dict[str, Callable[[], object]]:
    data = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    ex, tx = ON.ours(data).requires_grad_(), ON.theirs(data).requires_grad_()
    if backward:
        def run_ember() -> None:
            _ten_ops(ex, em).sum().backward()

        def run_torch() -> None:
            _ten_ops(tx, torch).sum().backward()

        return {"ember": run_ember, "torch": run_torch}
    return {"ember": lambda: _ten_ops(ex, em), "torch": lambda: _ten_ops(tx, torch)}


def demo_epoch() -> dict[str, Callable[[], object]]:
    from ember_core.demo import load_digits, make_model

    x_train, y_train, _, _ = load_digits(0)
    order = np.random.default_rng(0).permutation(len(y_train))
    batches = [order[i:i + 32] for i in range(0, len(order), 32)]
    em_batches = [(ON.ours(x_train[b]), ON.ours(y_train[b])) for b in batches]
    torch_batches = [(ON.theirs(x_train[b]), ON.theirs(y_train[b])) for b in batches]
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(512, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    ours = make_model()
    same_weights(ours, theirs)
    opt, topt = optim.Adam(ours.parameters(), lr=3e-3), torch.optim.Adam(theirs.parameters(), lr=3e-3)
    loss_fn, tloss_fn = nn.CrossEntropyLoss(label_smoothing=0.05), torch.nn.CrossEntropyLoss(label_smoothing=0.05)

    def ember_epoch() -> None:
        for x, y in em_batches:
            loss = loss_fn(ours(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        loss.item()

    def torch_epoch() -> None:
        for x, y in torch_batches:
            loss = tloss_fn(theirs(x), y)
            topt.zero_grad()
            loss.backward()
            topt.step()
        loss.item()

    return {"ember": ember_epoch, "torch": torch_epoch}


def conv_net_step() -> dict[str, Callable[[], object]]:
    """One SGD step of a small ResNet-style CNN on 32x32x3 images, batch 32: 3x3 convolutions at
    strides 1 and 2, a 1x1 convolution, batch norm after each, global average pooling."""
    def make(lib: object) -> object:
        def conv_bn(cin: int, cout: int, k: int, stride: int) -> list[object]:
            return [lib.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False), lib.BatchNorm2d(cout),
                    lib.ReLU()]
        return lib.Sequential(*conv_bn(3, 32, 3, 1), *conv_bn(32, 32, 3, 1), *conv_bn(32, 64, 3, 2),
                              *conv_bn(64, 64, 1, 1), lib.AdaptiveAvgPool2d(1), lib.Flatten(), lib.Linear(64, 10))

    ours, theirs = make(nn), make(torch.nn)
    same_weights(ours, theirs)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((32, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 32)
    ex, ey, tx, ty = ON.ours(x), ON.ours(y), ON.theirs(x), ON.theirs(y)
    opt, topt = optim.SGD(ours.parameters(), lr=0.01, momentum=0.9), torch.optim.SGD(theirs.parameters(), lr=0.01,
                                                                                       momentum=0.9)
    loss_fn, tloss_fn = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()

    def step(model: object, optimizer: object, loss: Callable[..., object], xs: object, ys: object) -> None:
        value = loss(model(xs), ys)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()

    return {"ember": lambda: step(ours, opt, loss_fn, ex, ey), "torch": lambda: step(theirs, topt, tloss_fn, tx, ty)}


CASES: list[tuple[str, Callable[[], dict[str, Callable[[], object]]], dict[str, float]]] = [  # name, case, targets
    ("MLP 784-256-256-10 SGD step, batch 128", lambda: mlp_step(0.0), {"cpu": 1.5, "cuda": 1.0}),
    ("  the same, SGD with momentum 0.9", lambda: mlp_step(0.9), {}),
    ("  its optimizer step alone (sgd_step)", lambda: sgd_update(0.9), {}),
    ("BatchNorm2d 32x32x16x16, forward + backward", lambda: norm_step("BatchNorm2d", (32, 32, 16, 16), 32), {}),
    ("BatchNorm2d 8x64x56x56, forward + backward", lambda: norm_step("BatchNorm2d", (8, 64, 56, 56), 64), {}),
    ("LayerNorm(256) on 32x128x256, fwd + bwd", lambda: norm_step("LayerNorm", (32, 128, 256), 256), {}),
    ("LayerNorm(1024) on 8x512x1024, fwd + bwd", lambda: norm_step("LayerNorm", (8, 512, 1024), 1024), {}),
    ("GroupNorm(32, 64) on 8x64x32x32, fwd + bwd", lambda: norm_step("GroupNorm", (8, 64, 32, 32), 32, 64), {}),
    ("  its forward alone", lambda: norm_step("GroupNorm", (8, 64, 32, 32), 32, 64, backward=False), {}),
    ("10 chained small ops, requires_grad", lambda: chained_ops(False), {"cpu": 1.0}),
    ("10 chained small ops + backward", lambda: chained_ops(True), {"cuda": 1.0}),
    ("demo CNN, one epoch (45 Adam steps)", demo_epoch, {"cuda": 1.0}),
    ("ResNet-style CNN SGD step, 32x3x32x32", conv_net_step, {"cuda": 1.0}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="alternating measurement rounds per case")
    args = parser.parse_args()
    global ON
    ON = Where(args.device)
    em.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    print(f"device={args.device}  threads={args.threads}  torch={torch.__version__}")
    print(f"{'case':42} {'ember':>11} {'torch':>11} {'ember/torch':>12} {'target':>7}")
    for name, make, targets in CASES:
        fns, target = make(), targets.get(args.device)
        times: dict[str, float] = {}
        for _ in range(args.rounds):  # alternate frameworks so that a noisy moment hits both
            for framework, fn in fns.items():
                best = timeit(fn, repeats=5, sync=ON.sync(framework))
                times[framework] = min(times.get(framework, float("inf")), best)
        ratio = times["ember"] / times["torch"]
        verdict = "-" if target is None else f"{target:.1f}" + (" ok" if ratio <= target else " MISS")
        print(f"{name:42} {_fmt(times['ember']):>11} {_fmt(times['torch']):>11} {ratio:12.2f} {verdict:>7}")


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


if __name__ == "__main__":
    main()
