"""`jit` of a plain function that uses modules it does not receive (a global `model`, a
closure's `net`) trains them as eager does: their parameters get gradients, and a later
`model.eval()`, a replaced parameter or a rebound name is seen. Every case is compared with
the same function run eagerly, in float64, to 1e-12."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv

F64 = dict(dtype=torch.float64)


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Tanh(), nn.Linear(8, 3)).double()


model = _net()  # read as a global by the functions below
act = torch.tanh


def loss_fn(x, y):
    return F.cross_entropy(model(x), y)


def activation(x):
    return act(x).sum()


def _grads(m):
    return [None if p.grad is None else p.grad.clone() for p in m.parameters()]


def _step(fn, m, x, y):
    """One seeded training step: the loss, and the module's gradients (then cleared)."""
    torch.manual_seed(1)  # the same dropout mask for both sides
    loss = fn(x, y)
    loss.backward()
    grads = _grads(m)
    m.zero_grad(set_to_none=True)
    return loss.detach(), grads


def _same(a, b):
    (la, ga), (lb, gb) = a, b
    torch.testing.assert_close(la, lb, rtol=1e-12, atol=1e-12)
    for p, q in zip(ga, gb, strict=True):
        assert (p is None) == (q is None)
        if p is not None:
            torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)


@pytest.fixture
def data():
    torch.manual_seed(2)
    return torch.randn(5, 4, **F64), torch.randint(0, 3, (5,))


@pytest.fixture(autouse=True)
def fresh_globals():
    global model, act
    saved = model, act
    model, act = _net(), torch.tanh
    yield
    model, act = saved


def test_a_global_models_parameters_get_eager_gradients_and_its_changes_are_seen(data):
    global model
    x, y = data
    jitted = tv.jit(loss_fn)
    for _ in range(3):
        _same(_step(jitted, model, x, y), _step(loss_fn, model, x, y))
    assert jitted.cache_misses == 1
    model.eval()  # dropout off: a new trace
    _same(_step(jitted, model, x, y), _step(loss_fn, model, x, y))
    model[3].weight = nn.Parameter(torch.randn(3, 8, **F64))  # replaced, same shape
    _same(_step(jitted, model, x, y), _step(loss_fn, model, x, y))
    model = _net(seed=5)  # the global rebound to another model
    for _ in range(2):
        _same(_step(jitted, model, x, y), _step(loss_fn, model, x, y))
    assert jitted.cache_misses == 3  # eval, then the new model (a same-shape parameter: same key)


def test_a_closure_module_trains_like_eager(data):
    x, y = data
    net = _net()
    twin = copy.deepcopy(net)

    def make(m):
        def step(x, y):
            return F.cross_entropy(m(x), y)

        return step

    jitted, eager = tv.jit(make(net)), make(twin)
    for _ in range(3):
        _same(_step(jitted, net, x, y), _step(eager, twin, x, y))


def test_a_rebound_global_function_is_seen(data):
    global act
    x, _ = data
    jitted = tv.jit(activation)
    for _ in range(2):
        torch.testing.assert_close(jitted(x), activation(x), rtol=0, atol=0)
    act = torch.relu
    torch.testing.assert_close(jitted(x), activation(x), rtol=0, atol=0)
    assert jitted.cache_misses == 2


def test_a_tensor_needing_grad_that_jit_cannot_see_is_refused_with_its_line(data):
    x, _ = data
    hidden = torch.randn(4, **F64, requires_grad=True)

    def helper(t):
        return t * hidden  # read by a function the jitted one calls

    def fn(x):
        return helper(x).sum()

    with pytest.raises(RuntimeError, match=r"requires grad .*test_function_modules.py:\d+"):
        tv.jit(fn)(x)
    with torch.no_grad():  # nothing to lose without grad
        torch.testing.assert_close(tv.jit(fn)(x), fn(x), rtol=0, atol=0)


def test_a_module_named_like_a_module_method_is_still_trained(data):
    x, y = data
    eval = _net()  # noqa: A001 - the clash is the point
    twin = copy.deepcopy(eval)

    def make(m):
        def step(x, y):
            return F.cross_entropy(eval(x), y) if m is None else F.cross_entropy(m(x), y)

        return step

    _same(_step(tv.jit(make(None)), eval, x, y), _step(make(twin), twin, x, y))


def test_a_modules_bound_method_trains_the_module(data):
    x, y = data
    net = _net()
    twin = copy.deepcopy(net)

    def loss(m):
        return lambda x, y: F.cross_entropy(m(x), y)

    jitted = tv.jit(net.forward)
    for _ in range(2):
        _same(_step(loss(jitted), net, x, y), _step(loss(twin), twin, x, y))


def step(m, x, y):
    return F.cross_entropy(m(x), y)


def test_modules_passed_as_arguments_train_like_eager_each_with_its_own_trace(data):
    x, y = data
    a, b = _net(1), _net(2)
    a_twin, b_twin = copy.deepcopy(a), copy.deepcopy(b)
    jitted = tv.jit(step)
    for _ in range(2):
        for ours, twin in ((a, a_twin), (b, b_twin)):
            _same(
                _step(lambda x, y, m=ours: jitted(m, x, y), ours, x, y),
                _step(lambda x, y, m=twin: step(m, x, y), twin, x, y),
            )
    assert jitted.cache_misses == 2  # one per model: modules are keyed by identity
    by_keyword = tv.jit(step)
    _same(
        _step(lambda x, y: by_keyword(x=x, y=y, m=a), a, x, y),
        _step(lambda x, y: step(a_twin, x, y), a_twin, x, y),
    )
