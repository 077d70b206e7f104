"""nn modules, functional layers and losses against PyTorch (float64, same weights), plus the Module
machinery: registration, state_dict round trips, train/eval, .to()."""

from __future__ import annotations

import numpy as np
import pytest

import ember_core as em
from ember_core import nn
from ember_core.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def em64(a):
    return em.asarray(np.asarray(a, dtype=np.float64))


def close(got, expected, rtol=1e-10, atol=1e-12):
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=rtol, atol=atol)


def copy_weights(ours: nn.Module, theirs: torch.nn.Module) -> None:
    """Load PyTorch's initial weights into our module (same names, same layouts)."""
    state = {k: em.asarray(v.detach().numpy()) for k, v in theirs.state_dict().items()}
    ours.load_state_dict(state)


# ---- losses -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_matches_torch(reduction, label_smoothing, weighted):
    logits, target = rand(6, 5), np.array([0, 4, 2, -100, 1, 4])
    weight = np.array([1.0, 2.0, 0.5, 1.5, 3.0]) if weighted else None
    tlogits = torch.from_numpy(logits).requires_grad_()
    expected = TF.cross_entropy(tlogits, torch.from_numpy(target), None if weight is None else torch.from_numpy(weight),
                                reduction=reduction, label_smoothing=label_smoothing)
    ours = em64(logits).requires_grad_()
    got = nn.CrossEntropyLoss(None if weight is None else em64(weight), reduction=reduction,
                              label_smoothing=label_smoothing)(ours, em.asarray(target))
    close(got, expected)
    upstream = rand(*expected.shape, seed=1)
    expected.backward(torch.from_numpy(upstream))
    got.backward(em64(upstream))
    close(ours.grad, tlogits.grad)


def test_cross_entropy_ignore_index_inside_the_classes_and_all_rows_ignored():
    logits, target = rand(5, 4), np.array([1, 2, 1, 0, 3])
    tlogits = torch.from_numpy(logits).requires_grad_()
    expected = TF.cross_entropy(tlogits, torch.from_numpy(target), ignore_index=1)
    ours = em64(logits).requires_grad_()
    got = F.cross_entropy(ours, em.asarray(target), ignore_index=1)
    close(got, expected)
    expected.backward()
    got.backward()
    close(ours.grad, tlogits.grad)
    nothing = F.cross_entropy(em64(logits), em.asarray(np.full(5, 7)), ignore_index=7)
    assert np.isnan(float(nothing)), "a mean over no counted rows is 0/0, as in PyTorch"


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])  # (ember-cpu's kernel, the composite)
def test_ignored_rows_get_no_gradient_when_no_row_counts(dtype):
    """'mean' divides by a zero total then; ignored rows still get 0, as in PyTorch, not 0 * (g / 0)."""
    logits = em.asarray(rand(3, 4), dtype=getattr(em, dtype)).requires_grad_()
    F.cross_entropy(logits, em.asarray([7, 7, 7]), ignore_index=7, label_smoothing=0.2).backward()
    assert logits.grad.tolist() == np.zeros((3, 4)).tolist()


@pytest.mark.parametrize(("target", "error", "match"), [
    (np.array([0, 4, 1]), em.IndexOutOfRangeError, r"class indices in \[0, 4\)"),
    (np.array([0, -1, 1]), em.IndexOutOfRangeError, r"got values in \[-1, 1\]"),
    (np.array([True, False, True]), em.DTypeError, "integer"),
    (np.array([0.0, 1.0, 1.0]), em.ShapeError, "probability targets"),
    (np.array([[0, 1, 1]]), em.ShapeError, "target shape"),
])
def test_cross_entropy_rejects_bad_targets(target, error, match):
    with pytest.raises(error, match=match):
        F.cross_entropy(em64(rand(3, 4)), em.asarray(target))


def test_cross_entropy_spatial_and_probability_targets():
    logits, target = rand(2, 4, 3, 3), np.random.default_rng(1).integers(0, 4, (2, 3, 3))
    close(F.cross_entropy(em64(logits), em.asarray(target), label_smoothing=0.2),
          TF.cross_entropy(torch.from_numpy(logits), torch.from_numpy(target), label_smoothing=0.2))
    probs = np.abs(rand(6, 5, seed=2))
    probs /= probs.sum(1, keepdims=True)
    logits = rand(6, 5)
    close(F.cross_entropy(em64(logits), em64(probs), label_smoothing=0.1),
          TF.cross_entropy(torch.from_numpy(logits), torch.from_numpy(probs), label_smoothing=0.1))


def test_nll_mse_and_bce_with_logits_match_torch():
    logp, target = TF.log_softmax(torch.from_numpy(rand(5, 3)), 1), np.array([2, 0, 1, 1, 0])
    close(nn.NLLLoss()(em64(logp.numpy()), em.asarray(target)), TF.nll_loss(logp, torch.from_numpy(target)))
    a, b = rand(4, 3), rand(4, 3, seed=1)
    close(nn.MSELoss()(em64(a), em64(b)), TF.mse_loss(torch.from_numpy(a), torch.from_numpy(b)))
    close(nn.MSELoss(reduction="sum")(em64(a), em64(b)), TF.mse_loss(torch.from_numpy(a), torch.from_numpy(b),
                                                                      reduction="sum"))
    logits, labels, pos = rand(4, 3) * 20, (rand(4, 3, seed=2) > 0).astype(np.float64), np.array([1.0, 2.0, 0.5])
    close(nn.BCEWithLogitsLoss()(em64(logits), em64(labels)),
          TF.binary_cross_entropy_with_logits(torch.from_numpy(logits), torch.from_numpy(labels)))
    close(nn.BCEWithLogitsLoss(pos_weight=em64(pos))(em64(logits), em64(labels)),
          TF.binary_cross_entropy_with_logits(torch.from_numpy(logits), torch.from_numpy(labels),
                                              pos_weight=torch.from_numpy(pos)))


def test_losses_reject_bad_input():
    with pytest.raises(em.IndexOutOfRangeError):
        F.cross_entropy(em.zeros((2, 3)), em.asarray([0, 3]))
    with pytest.raises(em.ShapeError):
        F.cross_entropy(em.zeros((2, 3)), em.asarray([0, 1, 2]))
    with pytest.raises(em.DTypeError):
        F.nll_loss(em.zeros((2, 3)), em.asarray([0.0, 1.0]).astype(em.float32).astype(em.bool))
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(em.zeros(2), em.zeros(2), reduction="avg")
    with pytest.raises(em.ShapeError):
        F.mse_loss(em.zeros(2), em.zeros(3))


# ---- layers -----------------------------------------------------------------------------------------

def _pair(ours_cls, theirs_cls, *args, **kwargs):
    theirs = theirs_cls(*args, **kwargs).double()
    ours = ours_cls(*args, **kwargs, dtype=em.float64)
    copy_weights(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda: _pair(nn.Linear, torch.nn.Linear, 5, 3), (4, 5)),
        (lambda: _pair(nn.Conv2d, torch.nn.Conv2d, 4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 7, 7)),
        (lambda: _pair(nn.Conv2d, torch.nn.Conv2d, 3, 4, (3, 1), padding="same", bias=False), (2, 3, 5, 6)),
        (lambda: _pair(nn.LayerNorm, torch.nn.LayerNorm, (4, 5)), (3, 4, 5)),
        (lambda: _pair(nn.GroupNorm, torch.nn.GroupNorm, 3, 6), (2, 6, 4, 5)),
        (lambda: _pair(nn.GroupNorm, torch.nn.GroupNorm, 1, 4, affine=False), (3, 4, 7)),
        (lambda: _pair(nn.Embedding, torch.nn.Embedding, 10, 4), None),
    ],
)
def test_parameterized_layers_match_torch_forward_and_backward(make, shape):
    ours, theirs = make()
    if shape is None:  # embedding
        idx = np.array([[1, 4, 9], [0, 4, 4]])
        x, tx = em.asarray(idx), torch.from_numpy(idx)
    else:
        data = rand(*shape)
        x, tx = em64(data).requires_grad_(), torch.from_numpy(data).requires_grad_()
    out, expected = ours(x), theirs(tx)
    close(out, expected)
    upstream = rand(*expected.shape, seed=5)
    out.backward(em64(upstream))
    expected.backward(torch.from_numpy(upstream))
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        close(p.grad, tp.grad)
    if shape is not None:
        close(x.grad, tx.grad)


@pytest.mark.parametrize(("ours_cls", "theirs_cls", "shape"),
                         [(nn.BatchNorm1d, torch.nn.BatchNorm1d, (8, 3)),
                          (nn.BatchNorm1d, torch.nn.BatchNorm1d, (4, 3, 5)),
                          (nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 2, 5))])
def test_batch_norm_trains_and_evaluates_like_torch(ours_cls, theirs_cls, shape):
    ours, theirs = _pair(ours_cls, theirs_cls, 3, momentum=0.2)
    with torch.no_grad():  # an affine transform that is not the identity, so that a slip in it shows
        theirs.weight.copy_(torch.from_numpy(rand(3, seed=11) + 0.5))
        theirs.bias.copy_(torch.from_numpy(rand(3, seed=12)))
    copy_weights(ours, theirs)
    for step in range(3):
        data = rand(*shape, seed=step) * 2 + 1
        x, tx = em64(data).requires_grad_(), torch.from_numpy(data).requires_grad_()
        out, expected = ours(x), theirs(tx)
        close(out, expected, rtol=1e-9)
        out.backward(em64(rand(*shape, seed=9)))
        expected.backward(torch.from_numpy(rand(*shape, seed=9)))
        close(x.grad, tx.grad, rtol=1e-8, atol=1e-10)
        for p, tp in ((ours.weight, theirs.weight), (ours.bias, theirs.bias)):
            close(p.grad, tp.grad, rtol=1e-8, atol=1e-10)
            p.grad = tp.grad = None
    close(ours.running_mean, theirs.running_mean)
    close(ours.running_var, theirs.running_var)
    assert ours.num_batches_tracked.item() == 3
    ours.eval(), theirs.eval()
    data = rand(*shape, seed=7)
    close(ours(em64(data)), theirs(torch.from_numpy(data)))


def test_group_norm_with_a_trained_affine_map_matches_torch():
    ours, theirs = _pair(nn.GroupNorm, torch.nn.GroupNorm, 2, 4, eps=1e-3)
    with torch.no_grad():  # not the identity map, so that a slip in the per-channel affine shows
        theirs.weight.copy_(torch.from_numpy(rand(4, seed=11) + 0.5))
        theirs.bias.copy_(torch.from_numpy(rand(4, seed=12)))
    copy_weights(ours, theirs)
    data = rand(3, 4, 5, 2, seed=3) * 2 + 1
    x, tx = em64(data).requires_grad_(), torch.from_numpy(data).requires_grad_()
    out, expected = ours(x), theirs(tx)
    close(out, expected, rtol=1e-9)
    out.backward(em64(rand(3, 4, 5, 2, seed=4)))
    expected.backward(torch.from_numpy(rand(3, 4, 5, 2, seed=4)))
    for got, want in ((x.grad, tx.grad), (ours.weight.grad, theirs.weight.grad), (ours.bias.grad, theirs.bias.grad)):
        close(got, want, rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="do not split into 3 groups"):
        nn.GroupNorm(3, 4)
    with pytest.raises(em.ShapeError, match=r"needs \(N, 4, ...\) input"):
        ours(em64(rand(3, 5, 2)))


def test_activation_and_shape_modules_match_torch():
    data = rand(3, 4, 2, 2) * 3
    x, tx = em64(data), torch.from_numpy(data)
    pairs = [(nn.ReLU(), torch.nn.ReLU()), (nn.GELU(), torch.nn.GELU()), (nn.GELU("tanh"), torch.nn.GELU("tanh")),
             (nn.SiLU(), torch.nn.SiLU()), (nn.Sigmoid(), torch.nn.Sigmoid()), (nn.Tanh(), torch.nn.Tanh()),
             (nn.Softmax(1), torch.nn.Softmax(1)), (nn.LogSoftmax(-1), torch.nn.LogSoftmax(-1)),
             (nn.Flatten(), torch.nn.Flatten()), (nn.MaxPool2d(2), torch.nn.MaxPool2d(2)),
             (nn.AvgPool2d(2, 1, 1), torch.nn.AvgPool2d(2, 1, 1)),
             (nn.AdaptiveAvgPool2d(1), torch.nn.AdaptiveAvgPool2d(1)), (nn.Identity(), torch.nn.Identity())]
    for ours, theirs in pairs:
        close(ours(x), theirs(tx), rtol=1e-9)


def test_dropout_scales_kept_values_and_is_reproducible():
    x = em.ones((200, 50))
    drop = nn.Dropout(0.3)
    em.manual_seed(3)
    a = np.asarray(drop(x))
    em.manual_seed(3)
    b = np.asarray(drop(x))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.unique(a), [0.0, 1 / 0.7], rtol=1e-6)
    assert abs((a == 0).mean() - 0.3) < 0.02
    drop.eval()
    assert np.asarray(drop(x)).tolist() == np.ones((200, 50)).tolist()
    with pytest.raises(ValueError):
        nn.Dropout(1.5)


def test_dropout_op_draws_bernoullis_mask_at_its_position_and_its_gradient_reuses_it():
    x = em.asarray(np.linspace(-2, 2, 60).reshape(6, 10).astype(np.float32))
    x.requires_grad = True
    y = em.dropout(x, 0.4, seed=11, offset=5)
    at = em.random.Generator("cpu", 11)
    at.set_state((11, 5))
    keep = np.asarray(em.bernoulli(em.full((), 0.6, dtype=em.float32), x.shape, generator=at))
    expected = np.where(keep, np.asarray(x.detach()) * np.float32(1 / 0.6), 0.0)
    np.testing.assert_array_equal(np.asarray(y.detach()), expected)
    y.backward(em.ones_like(y))
    np.testing.assert_array_equal(np.asarray(x.grad), np.where(keep, np.float32(1 / 0.6), 0.0))


@pytest.mark.parametrize("kwargs", [{"p": 1.0}, {"p": -0.1}, {"seed": -1}, {"offset": 2**64}, {"seed": 1.5}])
def test_dropout_op_refuses_arguments_outside_its_domain(kwargs):
    args = {"p": 0.5, "seed": 0, "offset": 0, **kwargs}
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        em.dropout(em.ones(3), args.pop("p"), **args)


# ---- Module machinery -------------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.BatchNorm1d(8))
        self.heads = nn.ModuleList([nn.Linear(8, 2), nn.Linear(8, 3)])
        self.scale = nn.Parameter(em.ones(1))
        self.register_buffer("calls", em.zeros((), dtype=em.int64))
        self.register_buffer("scratch", em.zeros(2), persistent=False)

    def forward(self, x):
        h = self.body(x) * self.scale
        return [head(h) for head in self.heads]


def test_registration_names_and_counts():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias", "heads.0.weight",
                     "heads.0.bias", "heads.1.weight", "heads.1.bias"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert [n for n, _ in net.named_buffers()] == ["calls", "scratch", "body.2.running_mean", "body.2.running_var",
                                                  "body.2.num_batches_tracked"]
    assert len(list(net.children())) == 2 and len(list(net.modules())) == 8
    assert not isinstance(em.ones(1), nn.Parameter)
    assert "Linear(in_features=4, out_features=8, bias=True)" in repr(net)


def test_train_eval_zero_grad_and_shared_parameters():
    net = Net()
    assert net.training and net.body[2].training
    net.eval()
    assert not net.training and not net.body[2].training
    out = net(em.ones((3, 4)))
    (out[0].sum() + out[1].sum()).backward()
    assert net.heads[0].weight.grad is not None
    net.zero_grad()
    assert net.heads[0].weight.grad is None
    shared = nn.Linear(2, 2)
    assert len(list(nn.Sequential(shared, shared).parameters())) == 2


def test_state_dict_round_trip_keeps_parameter_identity():
    a, b = Net(), Net()
    state = a.state_dict()
    assert "scratch" not in state and "calls" in state
    weight = b.heads[0].weight
    missing, unexpected = b.load_state_dict(state)
    assert (missing, unexpected) == ([], [])
    assert b.heads[0].weight is weight
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)
    with pytest.raises(KeyError, match="missing keys"):
        b.load_state_dict({k: v for k, v in state.items() if k != "scale"})
    with pytest.raises(em.ShapeError):
        b.load_state_dict({**state, "scale": em.ones(2)})
    assert b.load_state_dict({"scale": em.ones(1) * 3}, strict=False).missing_keys


def test_to_converts_floating_state_and_keeps_integer_buffers():
    net = Net().to(em.float64)
    assert all(p.dtype == em.float64 for p in net.parameters())
    assert net.calls.dtype == em.int64 and net.body[2].running_mean.dtype == em.float64
    assert all(isinstance(p, nn.Parameter) for p in net.parameters())
    net.to("cpu")
    out = net(em.ones((2, 4), dtype=em.float64))
    assert out[0].dtype == em.float64


def test_module_errors_are_clear():
    class Forgot(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(em.ones(1))

    with pytest.raises(AttributeError, match="super"):
        Forgot()
    net = Net()
    with pytest.raises(TypeError, match="Parameter"):
        net.scale = em.ones(1)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        net.nope  # noqa: B018
    with pytest.raises(NotImplementedError):
        nn.Module()(1)


def test_init_functions_follow_their_formulas():
    em.manual_seed(0)
    w = nn.Parameter(em.empty((300, 200)))
    nn.init.kaiming_uniform_(w, nonlinearity="relu")
    bound = np.sqrt(6 / 200)
    values = np.asarray(w)
    assert values.max() <= bound and values.min() >= -bound and values.std() == pytest.approx(bound / np.sqrt(3),
                                                                                                 rel=0.02)
    nn.init.xavier_normal_(w)
    assert np.asarray(w).std() == pytest.approx(np.sqrt(2 / 500), rel=0.02)
    nn.init.constant_(w, 0.5)
    assert np.unique(np.asarray(w)).tolist() == [0.5]
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(torch.nn.init.calculate_gain("leaky_relu", 0.2))
    with pytest.raises(ValueError):
        nn.init.calculate_gain("swish")


def test_sequential_fuses_linear_and_conv_with_a_following_relu(monkeypatch):
    em.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3), nn.ReLU(), nn.ReLU())
    x = em.asarray(rand(2, 1, 4, 4), dtype=em.float32)
    unfused = x
    for module in model:
        unfused = module(unfused)
    activations = []
    for name in ("conv2d", "linear"):
        op = getattr(em, name)
        monkeypatch.setattr(em, name, lambda *a, _op=op, **k: activations.append(k.get("activation")) or _op(*a, **k))
    fused = model(x)
    np.testing.assert_array_equal(np.asarray(fused), np.asarray(unfused))
    assert activations == ["relu", "relu"]

    class Logged(nn.Linear):
        calls = 0

        def forward(self, x, activation=None):
            Logged.calls += 1
            return super().forward(x, activation)

    nn.Sequential(Logged(3, 3), nn.ReLU())(em.ones((1, 3)))
    assert Logged.calls == 1 and activations[-1] is None  # a subclass runs its own forward, unfused
