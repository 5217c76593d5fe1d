"""A call repeating the last call's tensors is looked up without building the key (a check
of the tensors' metadata in C++). Every change the key sees must still be seen after a run of
such calls: each case below makes three identical calls first, then changes one thing, and
compares values and gradients with eager PyTorch (to 1e-12: a non-contiguous input
sums in another order)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from tests.helpers import value_and_grads
from thunderviz.executor import repeat

F64 = dict(dtype=torch.float64)


def _fn(x, w):
    return (x @ w).tanh().sum()


def _check(jitted, fn, *args):
    """One call: value and gradients of the args that require grad, against eager."""
    got, got_grads = value_and_grads(jitted, *args)
    want, want_grads = value_and_grads(fn, *args)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for g, e in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def _warm(jitted, fn, *args):
    for _ in range(3):
        _check(jitted, fn, *args)


@pytest.fixture(params=["with the check", "without it"])
def tensor_check(request, monkeypatch):
    """Every case runs twice: with torch's C++ tensor check, and as on a torch build
    without it (the private API missing), where every call is keyed."""
    if request.param == "without it":
        monkeypatch.setattr(repeat, "TensorGuards", None)
    return request.param


def test_each_change_of_a_tensor_argument_after_repeated_calls_retraces(tensor_check):
    x = torch.randn(4, 3, **F64, requires_grad=True)
    w = torch.randn(3, 5, **F64, requires_grad=True)
    changes = [
        (torch.randn(6, 3, **F64, requires_grad=True), w),  # shape
        (x.detach(), w),  # requires_grad
        (torch.randn(3, 4, **F64).t().requires_grad_(), w),  # strides: not contiguous
        (x.detach().float().requires_grad_(), w.detach().float().requires_grad_()),  # dtype
    ]
    for i, (x2, w2) in enumerate(changes):
        jitted = tv.jit(_fn)
        _warm(jitted, _fn, x, w)
        _check(jitted, _fn, x2, w2)
        assert jitted.cache_misses == 2, i
        _check(jitted, _fn, x, w)  # and back: the first trace again
        assert jitted.cache_misses == 2, i


def test_a_parameter_where_a_tensor_was_fails_the_check_and_finds_the_same_key(tensor_check):
    x = torch.randn(4, 3, **F64, requires_grad=True)
    w = torch.randn(3, 5, **F64, requires_grad=True)
    jitted = tv.jit(_fn)
    _warm(jitted, _fn, x, w)
    _check(jitted, _fn, x, nn.Parameter(w.detach().clone()))
    assert jitted.cache_misses == 1  # the key holds metadata, not the tensor's type


def test_new_values_of_the_same_metadata_reuse_the_trace_with_their_own_results(tensor_check):
    jitted = tv.jit(_fn)
    for _ in range(5):
        x = torch.randn(4, 3, **F64, requires_grad=True)
        w = torch.randn(3, 5, **F64, requires_grad=True)
        _check(jitted, _fn, x, w)
    assert jitted.cache_misses == 1


def _pair(*xs):
    if len(xs) == 1:  # one list of tensors
        return (xs[0][0] * 2 + xs[0][1]).sum()
    return (xs[0] * 3 - xs[1]).sum()


def test_a_list_of_the_same_tensors_is_not_taken_for_the_tensors(tensor_check):
    a = torch.randn(3, **F64, requires_grad=True)
    b = torch.randn(3, **F64, requires_grad=True)
    jitted = tv.jit(_pair)
    _warm(jitted, _pair, a, b)
    _check(jitted, _pair, [a, b])
    assert jitted.cache_misses == 2


def _scaled(x, k):
    return (x * k).sum()


def test_a_number_argument_after_repeated_calls_is_keyed_by_value(tensor_check):
    x = torch.randn(3, **F64, requires_grad=True)
    jitted = tv.jit(_scaled)
    _warm(jitted, _scaled, x, 2)
    _check(jitted, _scaled, x, 3)
    _check(jitted, _scaled, x, 3.0)
    assert jitted.cache_misses == 3


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.0), nn.Linear(4, 2)).double()


def _model_grads_match(jitted, eager, ours, x):
    torch.testing.assert_close(jitted(x).sum(), eager(x).sum(), rtol=1e-12, atol=1e-12)
    jitted(x).sum().backward()
    eager(x).sum().backward()
    for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
        if p.grad is None:
            assert q.grad is None, name
        else:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-12, atol=1e-12, msg=name)
        p.grad, q.grad = None, None


def test_module_state_changes_after_repeated_calls_retrace(tensor_check):
    x = torch.randn(5, 3, **F64)
    changes = [
        lambda m: m[0].weight.requires_grad_(False),
        lambda m: setattr(m[2], "weight", nn.Parameter(torch.randn(2, 4, **F64))),
        lambda m: setattr(m[2], "bias", nn.Parameter(torch.randn(1, **F64))),  # broadcast
        lambda m: m[1].train(False),
        lambda m: m[1].register_forward_hook(lambda mod, i, o: o * 2),
    ]
    for i, change in enumerate(changes):
        eager = _model()
        ours = copy.deepcopy(eager)
        jitted = tv.jit(ours)
        for _ in range(3):
            _model_grads_match(jitted, eager, ours, x)
        for m in (eager, ours):
            torch.manual_seed(1)  # the same new tensors for both
            change(m)
        _model_grads_match(jitted, eager, ours, x)
        misses = jitted.cache_misses
        assert misses >= 2 or i == 1, (i, misses)  # a same-shape weight: the same trace
        _model_grads_match(jitted, eager, ours, x)
        assert jitted.cache_misses == misses, i


def test_grad_mode_after_repeated_calls_is_part_of_the_key(tensor_check):
    x = torch.randn(4, 3, **F64, requires_grad=True)
    w = torch.randn(3, 5, **F64, requires_grad=True)
    jitted = tv.jit(_fn)
    _warm(jitted, _fn, x, w)
    with torch.no_grad():
        out = jitted(x, w)
    assert not out.requires_grad
    torch.testing.assert_close(out, _fn(x, w).detach(), rtol=1e-12, atol=1e-12)
    assert jitted.cache_misses == 2


def _square(x):
    return (x * x).sum()


def test_the_lru_order_holds_across_repeated_calls(tensor_check):
    jitted = tv.jit(_square, cache_size=2)
    a, b, c = (torch.randn(n, **F64, requires_grad=True) for n in (2, 3, 4))
    _warm(jitted, _square, a)
    _check(jitted, _square, b)
    _warm(jitted, _square, a)  # a is the most recent again
    _check(jitted, _square, c)  # evicts b, the least recent
    _warm(jitted, _square, a)
    assert jitted.cache_misses == 3
    _check(jitted, _square, b)
    assert jitted.cache_misses == 4


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.act = nn.Tanh()
        self.scale = 2.0

    def forward(self, x):
        return self.b(self.act(self.a(x))) * self.scale


def _scaled_model():
    torch.manual_seed(0)
    return _Scaled().double()


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "scale", 3.0),  # a plain attribute the trace baked in
        lambda m: setattr(m.b, "weight", m.a.weight),  # tied after the calls
        lambda m: setattr(m, "act", nn.ReLU()),  # a submodule replaced
    ],
    ids=["attribute", "tied weights", "submodule replaced"],
)
def test_module_changes_the_key_does_not_hold_are_seen_after_repeated_calls(change, tensor_check):
    x = torch.randn(5, 4, **F64)
    eager = _scaled_model()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    for _ in range(3):
        _model_grads_match(jitted, eager, ours, x)
    change(eager)
    change(ours)
    for _ in range(3):
        _model_grads_match(jitted, eager, ours, x)
    assert jitted.cache_misses == 2


def test_autocast_after_repeated_calls_retraces_with_its_casts(tensor_check):
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    jitted = tv.jit(_fn)
    for _ in range(3):
        jitted(x, w)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = jitted(x, w), _fn(x, w)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert jitted.cache_misses == 2


@pytest.mark.parametrize("which", ["input", "output"])
def test_a_saved_tensor_modified_in_place_before_backward_is_refused_like_eager(which):
    """Autograd's version check covers what the jitted call saved, as eager's nodes'."""

    def fn(x):
        return x.exp()  # saves its output (and nothing else)

    def fn_input(x):
        return (x * x).sum()  # saves its input

    program = fn if which == "output" else fn_input
    jitted = tv.jit(program)
    for run in (program, jitted, jitted, jitted):  # eager, then the first and repeated calls
        x = torch.randn(3, **F64, requires_grad=True)
        leaf = x * 1  # not a leaf, so in-place changes are allowed before backward
        out = run(leaf)
        (out if which == "output" else leaf).add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def _with_factories(x):
    return (x + torch.ones(3)).sum() * torch.tensor(0.1)


def test_the_default_dtype_after_repeated_calls_is_part_of_the_key(tensor_check):
    x = torch.randn(3, **F64)
    jitted = tv.jit(_with_factories)
    for _ in range(3):
        jitted(x)
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)  # what torch.tensor(0.1) makes changes
        torch.testing.assert_close(jitted(x), _with_factories(x), rtol=0, atol=0)
    finally:
        torch.set_default_dtype(before)
    assert jitted.cache_misses == 2
