"""``ember demo``: train a small CNN on scikit-learn's handwritten digits (1,797 8x8 images, shipped
inside scikit-learn, nothing downloaded) on the best available device, and report the held-out test
accuracy, which providers ran each op, and what fell back to the host."""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

import ember_core as em
from ember_core import nn, optim
from ember_core.autograd import no_grad
from ember_core.data import DataLoader, TensorDataset

TARGET_ACCURACY = 0.97
DEFAULT_EPOCHS = 10  # also named in the help of `ember demo --epochs`
_PREFERRED_DEVICES = ("cuda", "rocm", "vulkan")


def _is_fast_device(backend: Any, device_type: str) -> bool:
    """A device exists, and its properties do not say it is a CPU: a software implementation (such
    as llvmpipe under Vulkan) is never faster than the native host backend."""
    from ember_core.device import Device

    try:
        if backend.hooks["ember_device_count"](device_type=device_type) == 0:
            return False
        properties = backend.hooks["ember_device_properties"](device=Device(device_type, 0))
    except Exception:  # a broken device is simply not the best one; `ember doctor` explains it
        return False
    return str(properties.get("type", "")).lower() != "cpu"


def best_device() -> str:
    """The first accelerator (cuda, rocm, vulkan, then others by name) with a fast device, else cpu."""
    from ember_core.plugins import MANAGER

    MANAGER.ensure_discovered()
    rank = {t: i for i, t in enumerate(_PREFERRED_DEVICES)}
    accelerators = sorted((t for t, backend in MANAGER.device_owner.items()
                           if t != "cpu" and _is_fast_device(backend, t)), key=lambda t: (rank.get(t, len(rank)), t))
    return accelerators[0] if accelerators else "cpu"


def load_digits(seed: int, test_fraction: float = 0.2) -> tuple[np.ndarray, ...]:
    """Images scaled to [0, 1] as (N, 1, 8, 8) float32, labels int64; a stratified split."""
    digits = _require("sklearn.datasets", "scikit-learn (its bundled digits data set)").load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(labels), dtype=bool)
    for digit in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == digit))
        test[members[: round(len(members) * test_fraction)]] = True
    return images[~test], labels[~test], images[test], labels[test]


def make_model(device: Any = None) -> nn.Module:
    """Two 3x3 convolutions (16, 32 channels), a 2x2 max-pool and two linear layers: ~43k parameters."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, device=device), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, device=device), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4 * 4, 64, device=device), nn.ReLU(), nn.Linear(64, 10, device=device),
    )


def accuracy(model: nn.Module, images: em.Tensor, labels: em.Tensor, batch_size: int = 512) -> float:
    model.eval()
    correct = 0
    with no_grad():
        for start in range(0, images.shape[0], batch_size):
            logits = model(images[start:start + batch_size])
            correct += int(em.sum(em.argmax(logits, axis=1) == labels[start:start + batch_size]).item())
    model.train()
    return correct / images.shape[0]


class DemoDependencyError(ImportError):
    """The demo's extra is not installed; the message is the command that installs it."""


def _require(module: str, why: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise DemoDependencyError(f"ember demo needs {why}: pip install \"ember[demo]\"") from None


def train(model: nn.Module, loader: DataLoader, epochs: int, test: tuple[em.Tensor, em.Tensor],
          say: Any, show_progress: bool) -> list[dict[str, float]]:
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    schedule = optim.CosineAnnealingLR(optimizer, T_max=epochs)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    history = []
    tqdm = _require("tqdm", "tqdm (its progress bar)").tqdm
    for epoch in range(1, epochs + 1):
        # disable=None: no bar when stdout is not a terminal (CI logs keep one line per epoch)
        bar = tqdm(total=len(loader), desc=f"epoch {epoch:>2}/{epochs}", unit="batch", leave=False,
                   disable=None if show_progress else True, file=sys.stdout)
        total, seen, correct = 0.0, 0, 0
        for images, labels in loader:
            logits = model(images)
            loss = loss_fn(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batch_loss = float(loss.item())
            total += batch_loss * labels.shape[0]
            seen += labels.shape[0]
            correct += int(em.sum(em.argmax(logits.detach(), axis=1) == labels).item())
            bar.set_postfix(loss=f"{total / seen:.4f}", acc=f"{correct / seen:.2%}", refresh=False)
            bar.update()
        bar.close()
        schedule.step()
        record = {"epoch": epoch, "loss": total / seen, "train_accuracy": correct / seen,
                  "test_accuracy": accuracy(model, *test)}
        history.append(record)
        say(f"epoch {epoch:>2}/{epochs}  loss {record['loss']:.4f}  train acc {record['train_accuracy']:.2%}  "
            f"test acc {record['test_accuracy']:.2%}")
    return history


def run_demo(device: str | None = None, epochs: int = DEFAULT_EPOCHS, seed: int = 0, quiet: bool = False,
             batch_size: int = 32) -> dict[str, Any]:
    """Train and evaluate; returns test_accuracy, target_accuracy, seconds, device, providers
    ({op: {provider or "composite": calls}}), fallbacks (``fallback_report()`` rows) and history."""
    say = (lambda _msg: None) if quiet else print
    device = device or best_device()
    dev = em.as_device(device)
    em.manual_seed(seed)
    x_train, y_train, x_test, y_test = load_digits(seed)
    train_set = TensorDataset(em.asarray(x_train, device=dev), em.asarray(y_train, device=dev))
    test = (em.asarray(x_test, device=dev), em.asarray(y_test, device=dev))
    loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, generator=em.random.Generator("cpu", seed))
    say(f"ember demo: a small CNN on scikit-learn's digits ({len(train_set)} train / {len(y_test)} test images, "
        f"8x8) on {dev}")
    em.reset_fallback_report()
    start = time.perf_counter()
    with em.trace_dispatch() as log:
        model = make_model(dev)
        history = train(model, loader, epochs, test, say, not quiet)
    seconds = time.perf_counter() - start
    result = {
        "test_accuracy": history[-1]["test_accuracy"], "target_accuracy": TARGET_ACCURACY, "seconds": seconds,
        "device": str(dev), "providers": log.providers(), "fallbacks": em.fallback_report(), "history": history,
    }
    if not quiet:
        _report(result, dev)
    return result


def _report(result: dict[str, Any], device: Any) -> None:
    by_provider: dict[str, list[str]] = {}
    for op, counts in sorted(result["providers"].items()):
        for provider in counts:
            by_provider.setdefault(provider, []).append(op)
    print(f"\nbackend: {device.backend.package} for {device}")
    for provider, ops in sorted(by_provider.items()):
        print(f"  {provider:<12} {len(ops):>3} ops: {', '.join(ops)}")
    if result["fallbacks"]:
        for row in result["fallbacks"]:
            print(f"  fell back to the host: {row['op']} ({row['calls']} calls, {row['bytes_moved']} bytes moved)")
    else:
        print("  nothing fell back to the host")
    verdict = "reached" if result["test_accuracy"] >= result["target_accuracy"] else "MISSED"
    print(f"\ntest accuracy {result['test_accuracy']:.2%} ({verdict} the {result['target_accuracy']:.0%} target) "
          f"in {result['seconds']:.1f} s")
