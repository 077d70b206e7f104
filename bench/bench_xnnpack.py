"""ember-xnnpack benchmarks: each case side by side with ember-cpu alone (xnnpack excluded) and
PyTorch 2.13 CPU, in the same process, alternating rounds.

Run: ``python bench/bench_xnnpack.py [--threads N] [--rounds R]``.  Prints, per case, the best
time of each contender (noise on a shared machine only ever adds time) and the ratios
xnnpack / PyTorch and xnnpack / ember-cpu (time ratios: lower is better; 0.91 = 1.1x faster),
each the median over rounds of the ratio within a round (the contenders of a round run back to
back, so a slow spell of the host hits both), with the share of rounds xnnpack won.
"xnnpack" is ember as installed with the extra (xnnpack first, declining the calls ember-cpu runs
faster); "served by" names the provider that ran each nn op there.
The layout rows time the NCHW <-> NHWC transposes a conv pays, to judge a channels-last format.
The demo row is one training step (forward, backward, Adam) of ``ember demo``'s CNN on a batch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from bench_core import timeit

import ember_core as em

try:
    import torch
except ImportError:  # the ember columns still run
    torch = None

Case = tuple[str, dict[str, Callable[[], object]]]


def ember(fn: Callable[[], object], use_xnnpack: bool) -> Callable[[], object]:
    def run() -> object:
        with em.providers(exclude=[] if use_xnnpack else ["xnnpack"]):
            return fn()

    return run


def contenders(ember_fn: Callable[[], object], torch_fn: Callable[[], object] | None) -> dict[str, Callable]:
    out = {"xnnpack": ember(ember_fn, True), "ember-cpu": ember(ember_fn, False)}
    if torch is not None and torch_fn is not None:
        out["torch"] = torch_fn
    return out


def nn_cases(rng: np.random.Generator) -> list[Case]:
    def arrays(*shapes: tuple[int, ...]) -> list[np.ndarray]:
        return [rng.standard_normal(s).astype(np.float32) for s in shapes]

    tt = (lambda *a: [torch.from_numpy(x) for x in a]) if torch is not None else (lambda *a: [None] * len(a))
    F = torch.nn.functional if torch is not None else None
    cases: list[Case] = []

    x, w, b = arrays((8, 64, 56, 56), (64, 64, 3, 3), (64,))
    ex, ew, eb = em.asarray(x), em.asarray(w), em.asarray(b)
    tx, tw, tb = tt(x, w, b)
    cases.append(("conv2d 8x64x56x56 -> 64, 3x3, pad 1", contenders(
        lambda: em.conv2d(ex, ew, eb, padding=1), F and (lambda: F.conv2d(tx, tw, tb, padding=1)))))
    cases.append(("conv2d + relu (fused in xnnpack)", contenders(
        lambda: em.conv2d(ex, ew, eb, padding=1, activation="relu"),
        F and (lambda: F.relu(F.conv2d(tx, tw, tb, padding=1))))))
    dw = arrays((64, 1, 3, 3))[0]
    edw, tdw = em.asarray(dw), tt(dw)[0]
    cases.append(("depthwise conv2d 8x64x56x56, 3x3", contenders(
        lambda: em.conv2d(ex, edw, padding=1, groups=64), F and (lambda: F.conv2d(tx, tdw, padding=1, groups=64)))))
    cases.append(("depthwise conv2d, stride 2", contenders(
        lambda: em.conv2d(ex, edw, padding=1, stride=2, groups=64),
        F and (lambda: F.conv2d(tx, tdw, padding=1, stride=2, groups=64)))))
    dy = arrays((8, 64, 56, 56))[0]
    edy, tdy = em.asarray(dy), tt(dy)[0]
    cases.append(("depthwise conv2d input gradient", contenders(
        lambda: em.conv2d_input_grad(edy, edw, input_shape=x.shape, padding=1, groups=64),
        F and (lambda: torch.nn.grad.conv2d_input(x.shape, tdw, tdy, padding=1, groups=64)))))
    cases.append(("depthwise conv2d weight gradient", contenders(
        lambda: em.conv2d_weight_grad(ex, edy, weight_shape=dw.shape, padding=1, groups=64),
        F and (lambda: torch.nn.grad.conv2d_weight(tx, dw.shape, tdy, padding=1, groups=64)))))
    cases.append(("conv2d input gradient (same conv)", contenders(
        lambda: em.conv2d_input_grad(edy, ew, input_shape=x.shape, padding=1),
        F and (lambda: torch.nn.grad.conv2d_input(x.shape, tw, tdy, padding=1)))))

    cases.append(("conv2d weight gradient (same conv)", contenders(
        lambda: em.conv2d_weight_grad(ex, edy, weight_shape=w.shape, padding=1),
        F and (lambda: torch.nn.grad.conv2d_weight(tx, w.shape, tdy, padding=1)))))
    xs, dys = arrays((32, 16, 8, 8), (32, 32, 8, 8))
    exs, edys = em.asarray(xs), em.asarray(dys)
    txs, tdys = tt(xs, dys)
    cases.append(("conv2d weight gradient, demo's 32x16x8x8 -> 32", contenders(
        lambda: em.conv2d_weight_grad(exs, edys, weight_shape=(32, 16, 3, 3), padding=1),
        F and (lambda: torch.nn.grad.conv2d_weight(txs, (32, 16, 3, 3), tdys, padding=1)))))

    xl, wl, bl = arrays((256, 2048), (2048, 2048), (2048,))
    exl, ewl, ebl = em.asarray(xl), em.asarray(wl), em.asarray(bl)
    txl, twl, tbl = tt(xl, wl, bl)
    cases.append(("linear 256 x 2048 -> 2048", contenders(
        lambda: em.linear(exl, ewl, ebl), F and (lambda: F.linear(txl, twl, tbl)))))

    # shapes XNNPACK keeps: small maps, 5x5 kernels, short depthwise rows, inference-size linear
    xm, wm, dwm = arrays((32, 16, 8, 8), (32, 16, 5, 5), (16, 1, 3, 3))
    exm, ewm, edwm = em.asarray(xm), em.asarray(wm), em.asarray(dwm)
    txm, twm, tdwm = tt(xm, wm, dwm)
    cases.append(("conv2d 32x16x8x8 -> 32, 5x5, pad 2", contenders(
        lambda: em.conv2d(exm, ewm, padding=2), F and (lambda: F.conv2d(txm, twm, padding=2)))))
    cases.append(("depthwise conv2d 32x16x8x8, 3x3 (declined)", contenders(
        lambda: em.conv2d(exm, edwm, padding=1, groups=16),
        F and (lambda: F.conv2d(txm, tdwm, padding=1, groups=16)))))
    xd, wd = arrays((32, 32, 6, 6), (32, 1, 3, 3))
    exd, ewd = em.asarray(xd), em.asarray(wd)
    txd, twd = tt(xd, wd)
    cases.append(("depthwise conv2d 32x32x6x6, 3x3", contenders(
        lambda: em.conv2d(exd, ewd, padding=1, groups=32), F and (lambda: F.conv2d(txd, twd, padding=1, groups=32)))))
    xi, wi = arrays((8, 1024), (1024, 1024))
    exi, ewi = em.asarray(xi), em.asarray(wi)
    txi, twi = tt(xi, wi)
    cases.append(("linear 8 x 1024 -> 1024 (inference)", contenders(
        lambda: em.linear(exi, ewi), F and (lambda: F.linear(txi, twi)))))

    cases.append(("max_pool2d 3x3 stride 2 pad 1, 8x64x56x56", contenders(
        lambda: em.max_pool2d(ex, 3, 2, 1), F and (lambda: F.max_pool2d(tx, 3, 2, 1)))))
    # dilated: windows inside the input (XNNPACK's) and past its edge (declined, issue 24)
    cases.append(("max_pool2d 3x3 stride 2 dilation 2, 8x64x56x56", contenders(
        lambda: em.max_pool2d(ex, 3, 2, 0, 2), F and (lambda: F.max_pool2d(tx, 3, 2, 0, 2)))))
    cases.append(("max_pool2d 3x3 pad 1 dilation 2, 8x64x56x56", contenders(
        lambda: em.max_pool2d(ex, 3, 1, 1, 2), F and (lambda: F.max_pool2d(tx, 3, 1, 1, 2)))))
    cases.append(("avg_pool2d 2x2 stride 2, 8x64x56x56", contenders(
        lambda: em.avg_pool2d(ex, 2, 2), F and (lambda: F.avg_pool2d(tx, 2, 2)))))
    return cases


def layout_cases(rng: np.random.Generator) -> list[Case]:
    """The transposes inside the conv above, alone: what a channels-last core format would save."""
    from ember_xnnpack import runtime
    from ember_xnnpack._native import ffi, lib

    nchw = rng.standard_normal((8, 64, 56 * 56)).astype(np.float32)
    nhwc = np.empty_like(nchw)
    src, dst = ffi.from_buffer("float[]", nchw), ffi.from_buffer("float[]", nhwc, require_writable=True)

    def transpose(rows: int, cols: int) -> Callable[[], object]:
        def run() -> object:
            with runtime.LOCK:
                return lib.exn_transpose(runtime.pool(), src, dst, 8, rows, cols, rows == 64)
        return run

    return [("  NCHW -> NHWC input (+ finiteness check)", {"xnnpack": transpose(64, 56 * 56)}),
            ("  NHWC -> NCHW output", {"xnnpack": transpose(56 * 56, 64)})]


def demo_case() -> Case | None:
    """One training step of the demo's CNN on a batch of 32 digits (weights change every step,
    so every conv/linear operator is re-created each step)."""
    try:
        from ember_core import nn, optim
        from ember_core.demo import make_model
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    images = em.asarray(rng.random((32, 1, 8, 8), dtype=np.float32))
    labels = em.asarray(rng.integers(0, 10, 32))
    steps = {}
    for name, use in (("xnnpack", True), ("ember-cpu", False)):
        em.manual_seed(0)
        model = make_model("cpu")
        optimizer = optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = nn.CrossEntropyLoss()

        def step(model=model, optimizer=optimizer, loss_fn=loss_fn) -> object:
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss

        steps[name] = ember(step, use)
    if torch is not None:
        torch.manual_seed(0)
        tmodel = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1),
            torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(512, 64), torch.nn.ReLU(),
            torch.nn.Linear(64, 10))
        topt = torch.optim.Adam(tmodel.parameters(), lr=1e-3)
        timages, tlabels = torch.from_numpy(images.numpy()), torch.from_numpy(labels.numpy())

        def torch_step() -> object:
            loss = torch.nn.functional.cross_entropy(tmodel(timages), tlabels)
            topt.zero_grad()
            loss.backward()
            topt.step()
            return loss

        steps["torch"] = torch_step
    return ("demo training step (CNN, batch 32)", steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="ember's and PyTorch's threads (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per case (default 5)")
    args = parser.parse_args()
    em.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    cases = nn_cases(rng) + layout_cases(rng)
    demo = demo_case()
    if demo is not None:
        cases.append(demo)
    print(f"threads: {args.threads}; times in ms (best of {args.rounds} alternating rounds); ratios are "
          f"medians of per-round time ratios, lower is better; won: rounds where xnnpack beat ember-cpu")
    print(f"{'case':<48} {'xnnpack':>9} {'ember-cpu':>10} {'torch':>9} {'xnn/torch':>10} {'xnn/cpu':>8} {'won':>5}"
          f"  served by")
    for name, fns in cases:
        for fn in fns.values():
            fn()  # warm up: operator creation, workspaces, caches
        served = serving_providers(fns["xnnpack"]) if not name.startswith(" ") else ""
        rounds: list[dict[str, float]] = []
        order = list(fns.items())
        for _ in range(args.rounds):
            order.reverse()  # whichever runs first in a round measured up to 8% slower: alternate
            rounds.append({label: timeit(fn, min_time=0.05, repeats=1) for label, fn in order})
        best = {label: min(r[label] for r in rounds) for label in fns}
        cols = [f"{best[k] * 1e3:>9.3f}" if k in best else f"{'-':>9}" for k in ("xnnpack", "ember-cpu", "torch")]
        vs_torch = f"{median_ratio(rounds, 'torch'):>10.2f}" if "torch" in best else f"{'-':>10}"
        vs_cpu, won = f"{'-':>8}", f"{'-':>5}"
        if "ember-cpu" in best:
            vs_cpu = f"{median_ratio(rounds, 'ember-cpu'):>8.2f}"
            won = f"{sum(r['xnnpack'] < r['ember-cpu'] for r in rounds) / len(rounds):>5.0%}"
        print(f"{name:<48} {cols[0]} {cols[1]:>10} {cols[2]} {vs_torch} {vs_cpu} {won}  {served}")


def median_ratio(rounds: list[dict[str, float]], other: str) -> float:
    return float(np.median([r["xnnpack"] / r[other] for r in rounds]))


def serving_providers(fn: Callable[[], object]) -> str:
    """Which provider ran the case's nn ops with xnnpack installed (it declines where ember-cpu wins)."""
    with em.trace_dispatch() as log:
        fn()
    nn_ops = ("conv2d", "linear", "max_pool2d", "avg_pool2d")  # their gradients too
    return ", ".join(f"{op}: {'/'.join(sorted(by))}" for op, by in sorted(log.providers().items())
                     if op.startswith(nn_ops))


if __name__ == "__main__":
    main()
