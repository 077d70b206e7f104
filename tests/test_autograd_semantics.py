"""Autograd semantics users rely on: accumulation, graph freeing, version-counter errors, views and
in-place writes, hooks, grad modes, higher order, autograd.grad, threads, the functional API,
complex gradients and dtypes.  Reference values are analytic or from PyTorch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ember_core as em
from ember_core import autograd
from ember_core.autograd import functional


def leaf(values, dtype=None) -> em.Tensor:
    return em.asarray(np.asarray(values, dtype=dtype or np.float64)).requires_grad_()


def grad_of(t: em.Tensor) -> np.ndarray:
    assert t.grad is not None
    return np.asarray(t.grad)


# ---- accumulation and graph structure ----------------------------------------------------------

def test_gradients_accumulate_across_backward_calls():
    x = leaf([1.0, 2.0])
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(grad_of(x), [2 + 3, 4 + 3])


def test_a_tensor_feeding_several_ops_sums_its_gradients():
    x = leaf([0.5, -1.0, 2.0])
    y = x * 2
    z = (em.sin(y) + y * y + em.exp(x)).sum()
    z.backward()
    xs = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(grad_of(x), 2 * np.cos(2 * xs) + 8 * xs + np.exp(xs))


def _clones_during(monkeypatch, fn) -> int:
    calls = []
    original = em.Tensor.clone
    monkeypatch.setattr(em.Tensor, "clone", lambda self: calls.append(1) or original(self))
    fn()
    return len(calls)


def test_a_fresh_gradient_becomes_dot_grad_without_a_copy(monkeypatch):
    w = leaf([1.0, 2.0, 3.0])
    assert _clones_during(monkeypatch, lambda: (w * 3).backward(em.ones(3, dtype=em.float64))) == 0
    np.testing.assert_allclose(grad_of(w), [3, 3, 3])


def test_dot_grad_never_aliases_a_tensor_someone_else_sees():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    g = em.asarray(np.array([1.0, 1.0]))
    (a + b).backward(g)  # add hands the same gradient object to both leaves, and it is the user's
    a.grad += 10
    np.testing.assert_allclose(grad_of(b), [1, 1])
    np.testing.assert_allclose(np.asarray(g), [1, 1])

    w = leaf([1.0, 2.0])
    w.backward(g)  # the root is the leaf itself: its gradient is the user's tensor
    g += 1
    np.testing.assert_allclose(grad_of(w), [1, 1])

    kept = []
    v = leaf([1.0, 2.0])
    v.register_hook(lambda grad: kept.append(grad))
    (v * 2).sum().backward()
    v.grad += 1
    np.testing.assert_allclose(np.asarray(kept[0]), [2, 2])

    x = leaf([1.0, 2.0])
    y = x + 0.0
    y.retain_grad()
    (y * 2).sum().backward()
    x.grad += 1
    np.testing.assert_allclose(grad_of(y), [2, 2])


def test_accumulation_adds_into_the_existing_dot_grad():
    w = leaf([1.0, 2.0])
    (w * 2).sum().backward()
    first = w.grad
    (w * 3).sum().backward()
    assert w.grad is first  # in place, as PyTorch: no new buffer per micro-batch
    np.testing.assert_allclose(grad_of(w), [5, 5])


def test_leaf_and_non_leaf():
    x = leaf([1.0, 2.0])
    y = x * 2
    assert x.is_leaf and x.grad_fn is None
    assert not y.is_leaf and y.grad_fn is not None and y.requires_grad
    y.sum().backward()
    assert y.grad is None  # non-leaves keep no gradient unless retain_grad()
    assert em.asarray(np.ones(2)).is_leaf and not em.asarray(np.ones(2)).requires_grad


def test_non_scalar_backward_needs_gradient():
    x = leaf([1.0, 2.0])
    y = x * 3
    with pytest.raises(RuntimeError, match="gradient="):
        y.backward()
    y.backward(em.asarray(np.array([1.0, 10.0])))
    np.testing.assert_allclose(grad_of(x), [3, 30])
    with pytest.raises(RuntimeError, match="shape"):
        (x * 3).backward(em.asarray(np.ones(3)))


def test_backward_of_a_tensor_outside_the_graph_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        em.asarray(np.ones(2)).sum().backward()


def test_integer_tensors_cannot_require_grad():
    with pytest.raises(em.DTypeError):
        em.asarray(np.array([1, 2])).requires_grad_()


# ---- retain_graph ------------------------------------------------------------------------------

def test_second_backward_through_a_freed_graph_raises():
    x = leaf([1.0, 2.0])
    y = (em.exp(x) * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=r"second time.*retain_graph=True"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = leaf([1.0, 2.0])
    y = (em.exp(x) * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    xs = np.array([1.0, 2.0])
    np.testing.assert_allclose(grad_of(x), 2 * (np.exp(xs) * xs + np.exp(xs)))


# ---- version counters, in-place ops ------------------------------------------------------------

def test_in_place_change_of_a_saved_tensor_raises_naming_the_op():
    x = leaf([1.0, 2.0])
    y = x * 1
    z = em.exp(y) * y  # multiply saves y
    y += 1
    with pytest.raises(RuntimeError, match=r"multiply.*in-place"):
        z.sum().backward()


def test_in_place_change_of_a_saved_result_raises():
    x = leaf([1.0, 2.0])
    y = em.exp(x)  # exp saves its result
    with em.no_grad():
        y.mul_(2) if hasattr(y, "mul_") else y.__imul__(2)
    with pytest.raises(RuntimeError, match="exp"):
        y.sum().backward()


def test_in_place_on_a_leaf_that_requires_grad():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="leaf"):
        x += 1
    with pytest.raises(RuntimeError, match="leaf"):
        x[0] = 5.0
    with em.no_grad():
        x -= 0.5
        x[1] = 7.0
    np.testing.assert_allclose(np.asarray(x.detach()), [0.5, 7.0])
    assert x.is_leaf and x.requires_grad


def test_in_place_ops_are_differentiable():
    x = leaf([1.0, 2.0, 3.0])
    y = x * 2
    y *= x  # y = 2 x^2
    y += 1
    y.sum().backward()
    np.testing.assert_allclose(grad_of(x), 4 * np.array([1.0, 2.0, 3.0]))


def test_views_and_in_place_writes_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    xs, ws, zs = rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal(3)
    upstream = rng.standard_normal((3, 3))

    def run(m, asarray):
        x, w, z = asarray(xs), asarray(ws), asarray(zs)
        for t in (x, w, z):
            t.requires_grad_()
        y = x * 1
        y[0] = w * 2
        yt = y.T if m is torch else y.mT
        yt[1] += z * x[2]
        v = y[:, 1:]
        v *= 3
        out = y * y
        out.backward(asarray(upstream))
        return [np.asarray(t.grad) if m is em else t.grad.numpy() for t in (x, w, z)]

    ours = run(em, em.asarray)
    theirs = run(torch, lambda a: torch.from_numpy(a.copy()))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_setitem_with_advanced_indices_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    xs, vs = rng.standard_normal((4, 3)), rng.standard_normal((2, 3))
    rows = np.array([3, 1])

    def run(m, asarray):
        x, v = asarray(xs).requires_grad_(), asarray(vs).requires_grad_()
        y = x * 2
        index = asarray(rows) if m is em else torch.from_numpy(rows)
        y[index] = v * v
        y[0, index - 1] = v[0, :2]
        (y * y).sum().backward()
        return [np.asarray(t.grad) if m is em else t.grad.numpy() for t in (x, v)]

    for a, b in zip(run(em, em.asarray), run(torch, lambda a: torch.from_numpy(a.copy()))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_view_taken_before_an_in_place_write_follows_the_write():
    x, w = leaf([1.0, 2.0]), leaf([5.0, 6.0])
    y = x * 1
    v = y[0:1]
    y[0:1] = w[0:1] * 3  # v now holds 3 * w[0]: its gradient goes to w, not x (as in PyTorch)
    (v * 2).sum().backward()
    np.testing.assert_array_equal(grad_of(x), [0, 0])
    np.testing.assert_array_equal(grad_of(w), [6, 0])


def test_graphs_are_freed_by_reference_counting():
    import gc
    import weakref

    x = leaf([1.0, 2.0])
    gc.disable()
    try:
        y = em.exp(x * 2)  # exp saves its result: the node must not keep the result alive
        y[0] = em.tanh(y[1])
        nodes = [weakref.ref(y.grad_fn), weakref.ref(em.sqrt(y).grad_fn)]
        del y
        assert all(node() is None for node in nodes)
    finally:
        gc.enable()


def test_writing_a_tensor_that_requires_grad_into_a_plain_one():
    buffer = em.zeros((2, 3), dtype=em.float64)
    v = leaf([1.0, 2.0, 3.0])
    buffer[1] = v
    assert buffer.requires_grad
    (buffer * buffer).sum().backward()
    np.testing.assert_allclose(grad_of(v), [2, 4, 6])


# ---- hooks and retain_grad ---------------------------------------------------------------------

def test_hooks_on_leaves_and_non_leaves():
    x = leaf([1.0, 2.0])
    y = x * 3
    seen = []
    y.register_hook(lambda g: seen.append(np.asarray(g).copy()))
    handle = x.register_hook(lambda g: g * 10)
    (y * y).sum().backward()
    np.testing.assert_allclose(seen[0], 2 * 3 * np.array([1.0, 2.0]))
    np.testing.assert_allclose(grad_of(x), 10 * 18 * np.array([1.0, 2.0]))
    handle.remove()
    x.grad = None
    (x * 1).sum().backward()
    np.testing.assert_allclose(grad_of(x), [1, 1])


def test_hook_on_non_leaf_replaces_the_gradient_passed_on():
    x = leaf([1.0, 2.0])
    y = x * 2
    y.register_hook(lambda g: g * 0 + 1)
    (y * y).sum().backward()
    np.testing.assert_allclose(grad_of(x), [2, 2])


@pytest.mark.parametrize("on", ["leaf", "non-leaf"])
@pytest.mark.parametrize(("returned", "error", "message"), [
    (lambda g: em.ones((2,), dtype=em.float64), em.ShapeError, r"returned one of shape \(2,\)"),
    (lambda g: em.ones((1, 3), dtype=em.float64), em.ShapeError, r"returned one of shape \(1, 3\)"),
    (lambda g: 3.0, em.DTypeError, "returned an object of type float"),
    (lambda g: np.ones(3), em.DTypeError, "returned an object of type ndarray"),
    (lambda g: g.astype(em.float32), em.DTypeError, "returned one of dtype float32"),
], ids=["shorter", "broadcastable", "float", "ndarray", "float32"])
def test_a_hook_must_return_none_or_a_gradient_of_the_same_kind(on, returned, error, message):
    """As in PyTorch, a hook may not change the gradient's shape or type (it used to become .grad)."""
    x = leaf([1.0, 2.0, 3.0])
    y = x * 2
    (x if on == "leaf" else y).register_hook(returned)
    owner = "a leaf" if on == "leaf" else "output 0 of multiply"
    with pytest.raises(error, match=f"hook '<lambda>' on {owner} \\(gradient of shape \\(3,\\), float64.*{message}"):
        (y * y).sum().backward()
    assert x.grad is None


def test_a_hook_may_not_move_the_gradient_to_another_device():
    from test_views_indexing import on_device

    device = on_device("vulkan")
    x = em.asarray(np.array([1.0, 2.0], np.float32)).requires_grad_()
    x.register_hook(lambda g: g.to_device(device))
    with pytest.raises(em.DeviceError, match="returned one on vulkan:0"):
        (x * 2).sum().backward()


def test_hooks_need_requires_grad():
    with pytest.raises(RuntimeError, match="require grad"):
        em.asarray(np.ones(2)).register_hook(lambda g: g)


def test_retain_grad():
    x = leaf([1.0, 2.0])
    y = x * 2
    y.retain_grad()
    assert y.retains_grad and not x.retains_grad
    (y * y).sum().backward()
    np.testing.assert_allclose(grad_of(y), [4, 8])
    assert not y.grad.requires_grad
    x.retain_grad()  # a leaf: a no-op
    np.testing.assert_allclose(grad_of(x), [8, 16])


# ---- grad modes --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [em.no_grad, em.inference_mode, lambda: em.set_grad_enabled(False)])
def test_modes_that_turn_recording_off(mode):
    x = leaf([1.0])
    with mode():
        y = x * 2
        assert not em.is_grad_enabled()
        with em.enable_grad():
            z = x * 2
    assert em.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad

    @mode()
    def decorated(t):
        return t * 2

    assert not decorated(x).requires_grad
    assert em.is_grad_enabled()


def test_inference_mode_is_queryable_and_restored():
    assert not autograd.is_inference_mode_enabled()
    with em.inference_mode():
        assert autograd.is_inference_mode_enabled()
    assert not autograd.is_inference_mode_enabled()
    with em.inference_mode(False):
        assert em.is_grad_enabled()


def test_enable_grad_as_decorator_inside_no_grad():
    x = leaf([2.0])

    @em.enable_grad()
    def f(t):
        return t * t

    with em.no_grad():
        y = f(x)
    assert y.requires_grad
    y.sum().backward()
    np.testing.assert_allclose(grad_of(x), [4])


def test_grad_mode_is_per_thread():
    results = []
    with em.no_grad():
        thread = threading.Thread(target=lambda: results.append(em.is_grad_enabled()))
        thread.start()
        thread.join()
    assert results == [True]


def test_modes_restore_after_an_exception():
    with pytest.raises(ValueError):
        with em.no_grad():
            raise ValueError
    assert em.is_grad_enabled()


def test_detach_shares_storage_and_leaves_the_graph():
    x = leaf([1.0, 2.0])
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None
    with em.no_grad():
        d[0] = 100.0
    assert float(y[0].item()) == 100.0
    y2 = x * 3
    y2.detach_()
    assert not y2.requires_grad and y2.is_leaf


def test_detached_write_into_a_saved_tensor_is_detected():
    x = leaf([1.0, 2.0])
    y = em.exp(x)
    y.detach()[0] = 5.0  # shares the version counter
    with pytest.raises(RuntimeError, match="exp"):
        y.sum().backward()


# ---- long chains -------------------------------------------------------------------------------

def test_a_chain_of_100000_ops():
    x = leaf([1.0])
    y = x
    for _ in range(100_000):
        y = y + 1e-5
    (y * 2).sum().backward()
    np.testing.assert_allclose(grad_of(x), [2])
    del y  # freeing the graph is not recursive either


def test_freeing_an_unused_long_graph_does_not_crash():
    x = leaf([1.0])
    y = x
    for _ in range(100_000):
        y = y * 1.0
    del y


# ---- higher order ------------------------------------------------------------------------------

def test_hessian_vector_product_with_create_graph():
    xs, vs = np.array([0.3, -1.2, 2.0]), np.array([1.0, -0.5, 2.0])
    x, v = leaf(xs), em.asarray(vs)
    f = (em.sin(x) * x * x).sum()  # d2/dx2 (x^2 sin x) = 2 sin x + 4 x cos x - x^2 sin x
    (g,) = autograd.grad(f, x, create_graph=True)
    assert g.requires_grad
    (g * v).sum().backward()
    np.testing.assert_allclose(grad_of(x), (2 * np.sin(xs) + 4 * xs * np.cos(xs) - xs ** 2 * np.sin(xs)) * vs)


def test_backward_with_create_graph_gives_differentiable_grad():
    x = leaf([2.0])
    (x ** 3).sum().backward(create_graph=True)
    g = x.grad
    assert g.requires_grad
    (gg,) = autograd.grad(g.sum(), x)
    np.testing.assert_allclose(np.asarray(gg), [12.0])


def test_third_derivative():
    x = leaf([0.7])
    (g1,) = autograd.grad(em.exp(2 * x).sum(), x, create_graph=True)
    (g2,) = autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = autograd.grad(g2.sum(), x)
    np.testing.assert_allclose(np.asarray(g3), [8 * np.exp(1.4)])


# ---- autograd.grad -----------------------------------------------------------------------------

def test_grad_returns_without_touching_dot_grad():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    gx, gw = autograd.grad((x * w).sum(), [x, w])
    np.testing.assert_allclose(np.asarray(gx), [3, 4])
    np.testing.assert_allclose(np.asarray(gw), [1, 2])
    assert x.grad is None and w.grad is None


def test_grad_allow_unused_and_errors():
    x, unused = leaf([1.0]), leaf([2.0])
    with pytest.raises(RuntimeError, match="allow_unused"):
        autograd.grad((x * 2).sum(), [x, unused])
    gx, gu = autograd.grad((x * 2).sum(), [x, unused], allow_unused=True)
    np.testing.assert_allclose(np.asarray(gx), [2])
    assert gu is None
    with pytest.raises(RuntimeError, match="requires grad"):
        autograd.grad((x * 2).sum(), [em.asarray(np.ones(1))])


def test_grad_with_respect_to_a_non_leaf_and_grad_outputs():
    x = leaf([1.0, 2.0])
    y = x * x
    z = y * 3
    (gy,) = autograd.grad(z, y, grad_outputs=em.asarray(np.array([1.0, 2.0])))
    np.testing.assert_allclose(np.asarray(gy), [3, 6])


def test_backward_inputs_restricts_accumulation():
    x, w = leaf([1.0]), leaf([2.0])
    (x * w).sum().backward(inputs=[w])
    assert x.grad is None
    np.testing.assert_allclose(grad_of(w), [1])


def test_backward_inputs_outside_the_graph():
    """PyTorch's answers: a tensor that requires grad but is not in the graph keeps .grad None; one that
    does not require grad, a non-tensor and an empty list are errors (one was a bare AssertionError)."""
    x, unrelated = leaf([1.0, 2.0]), leaf([5.0])
    (x * 2).sum().backward(inputs=[unrelated])
    assert unrelated.grad is None and x.grad is None
    (x * 2).sum().backward(inputs=[unrelated * 3])  # nor a non-leaf outside the graph
    assert x.grad is None
    with pytest.raises(RuntimeError, match=r"must be a tensor that requires grad; this one \(shape \(1,\)\)"):
        (x * 2).sum().backward(inputs=[em.asarray(np.ones(1))])
    with pytest.raises(TypeError, match="must be an ember tensor, got float"):
        (x * 2).sum().backward(inputs=[3.0])
    with pytest.raises(RuntimeError, match=r"backward\(inputs=\[\]\)"):
        (x * 2).sum().backward(inputs=[])
    assert x.grad is None


# ---- threads -----------------------------------------------------------------------------------

def _independent_graph(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = leaf(rng.standard_normal((8, 8)))
    w = em.asarray(rng.standard_normal((8, 8)))
    y = x
    for _ in range(20):
        y = em.tanh(y @ w) + y * 0.5
    y.sum().backward()
    return grad_of(x)


def test_concurrent_backward_on_independent_graphs():
    sequential = [_independent_graph(seed) for seed in range(4)]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for _ in range(3):
                results[seed] = _independent_graph(seed)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for seed in range(4):
        np.testing.assert_array_equal(results[seed], sequential[seed])


# ---- functional --------------------------------------------------------------------------------

def test_functional_vjp_jvp():
    xs = np.array([0.5, -1.0, 2.0])
    vs = np.array([1.0, 2.0, -1.0])

    def f(x):
        return em.sin(x) * x

    derivative = np.cos(xs) * xs + np.sin(xs)
    out, vjp = functional.vjp(f, em.asarray(xs), em.asarray(vs))
    np.testing.assert_allclose(np.asarray(out), np.sin(xs) * xs)
    np.testing.assert_allclose(np.asarray(vjp), vs * derivative)
    out, jvp = functional.jvp(f, em.asarray(xs), em.asarray(vs))
    np.testing.assert_allclose(np.asarray(jvp), vs * derivative)


def test_functional_jacobian_and_hessian():
    a = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0]])

    def f(x):
        return em.asarray(a) @ (x * x)

    xs = np.array([0.3, -2.0])
    jac = functional.jacobian(f, em.asarray(xs))
    np.testing.assert_allclose(np.asarray(jac), a * 2 * xs)

    def g(x, y):
        return (x * x * y).sum() + em.exp(y).sum()

    ys = np.array([1.5, 0.5])
    h = functional.hessian(lambda x: g(x, em.asarray(ys)), em.asarray(xs))
    np.testing.assert_allclose(np.asarray(h), np.diag(2 * ys))
    jx, jy = functional.jacobian(lambda x, y: x * y, (em.asarray(xs), em.asarray(ys)))
    np.testing.assert_allclose(np.asarray(jx), np.diag(ys))
    np.testing.assert_allclose(np.asarray(jy), np.diag(xs))


# ---- complex (conjugate Wirtinger, as PyTorch) -------------------------------------------------

COMPLEX_FNS = {
    "mul-conj": (lambda m, a, b: (a * m.conj(b)).abs() if m is not em else em.abs(a * em.conj(b))),
    "exp-log": (lambda m, a, b: m.exp(a) * m.log(b)),
    "abs-real-imag": (lambda m, a, b: m.abs(a) + m.real(b) * m.imag(a)),
    "sqrt-div": (lambda m, a, b: m.sqrt(b) / a),
    "matmul-sum": (lambda m, a, b: (a.reshape(2, 2) @ b.reshape(2, 2)).sum() if m is not em
                   else em.sum(a.reshape((2, 2)) @ b.reshape((2, 2)))),
}


@pytest.mark.parametrize("key", sorted(COMPLEX_FNS))
def test_complex_gradients_match_torch(key):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    arrays = [rng.uniform(0.3, 1.5, 4) + 1j * rng.uniform(-1, 1, 4) for _ in range(2)]
    fn = COMPLEX_FNS[key]
    ours = [em.asarray(a).requires_grad_() for a in arrays]
    theirs = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
    out_e, out_t = fn(em, *ours), fn(torch, *theirs)
    upstream = rng.standard_normal(tuple(out_t.shape)) + (1j * rng.standard_normal(tuple(out_t.shape))
                                                           if out_t.is_complex() else 0)
    out_e.backward(em.asarray(upstream))
    out_t.backward(torch.from_numpy(np.asarray(upstream)))
    for e, t in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(e.grad), t.grad.resolve_conj().numpy(), rtol=1e-10, atol=1e-12)


def test_real_input_through_complex_math_gets_a_real_gradient():
    x = leaf([0.5, 1.5])
    z = em.astype(x, em.complex128) * (1 + 2j)
    em.abs(z).sum().backward()
    assert x.grad.dtype == em.float64
    np.testing.assert_allclose(grad_of(x), np.sign([0.5, 1.5]) * np.sqrt(5))


# ---- dtypes and broadcasting -------------------------------------------------------------------

def test_gradient_takes_the_leaf_dtype():
    x = leaf([1.0, 2.0], dtype=np.float32)
    y = em.astype(x, em.float64) * em.asarray(np.array([3.0, 4.0]))
    y.sum().backward()
    assert x.grad.dtype == em.float32
    np.testing.assert_allclose(grad_of(x), [3, 4])
    w = leaf([1.0, 2.0], dtype=np.float32)
    (w * em.asarray(np.array([0.5, 0.25]))).sum().backward()  # promoted to float64 by the op
    assert w.grad.dtype == em.float32


def test_broadcasting_sums_the_gradient_back():
    b = leaf([[1.0], [2.0]])
    s = leaf(3.0)
    x = em.asarray(np.ones((4, 2, 3)))
    (x * b + s).sum().backward()
    assert b.grad.shape == (2, 1) and s.grad.shape == ()
    np.testing.assert_allclose(grad_of(b), [[12], [12]])
    np.testing.assert_allclose(grad_of(s), 24)


def test_moving_to_another_device_is_recorded(device):
    """x.to_device(d) is part of the graph, as PyTorch's .to: the gradient comes back to x's device
    (it used to give a tensor outside the graph, so x.grad stayed None)."""
    x = em.asarray([1.0, -2.0, 3.0]).requires_grad_()
    moved = x.to_device(device)
    assert moved.requires_grad and (moved.grad_fn is not None or device == x.device)
    (moved * moved).sum().backward()
    assert x.grad.device == x.device
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0, 6.0])
    with autograd.no_grad():
        assert not x.to_device(device).requires_grad or device == x.device
