"""User-defined torch.autograd.Functions: their own backward is used, as in eager.

Every check is against eager PyTorch (which runs the same user backward): gradients of
every parameter over three SGD steps through `jit`, `value_and_grad`/`vjp`, and the debug
stepper. A deliberately wrong backward must come out as that wrong gradient."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
import torch.nn as nn
from torch.autograd.function import Function

import thunderviz as tv
from tests.autodiff.custom_function_models import (
    NEEDS_LOG,
    Cube,
    DoubleInPlace,
    FunctionMLP,
    Loss,
    RoundSTE,
    ScaleGrad,
    SplitScale,
    WrongGrad,
    mse,
)
from tests.autodiff.idioms_training import TIGHT, train_like_eager
from tests.helpers import autograd_reference, check_value_and_grad
from thunderviz.autodiff.errors import AutodiffError
from thunderviz.capture import function_apply
from thunderviz.capture.custom_function import APPLY_ID, BACKWARD_ID, FORWARD_ID
from thunderviz.capture.errors import CaptureError


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_functions_in_an_mlp_train_like_eager(dtype):
    torch.manual_seed(0)
    model = FunctionMLP().to(dtype)
    xs = [torch.randn(5, 6, dtype=dtype) for _ in range(3)]
    NEEDS_LOG.clear()
    train_like_eager(model, lambda step: ((xs[step],), {}), mse, dtype=dtype)
    # eager and jit alternate each step: the user's backward saw the same needs_input_grad
    assert NEEDS_LOG == [(True, True, False, False)] * 6


def test_the_trace_shows_one_call_per_function_and_the_users_backward():
    torch.manual_seed(0)
    model, x = FunctionMLP(), torch.randn(5, 6)
    forward = tv.trace(model, x)
    calls = [b for b in forward.bound_symbols if b.sym.id == APPLY_ID]
    assert [b.args[0].value.cls for b in calls] == [ScaleGrad, RoundSTE, SplitScale, Cube]
    assert all(b.subsymbols for b in calls)  # the forward's ops, for viewing
    assert calls[0].source.code == "h = ScaleGrad.apply(h, -0.3)"
    text = str(forward)
    assert "= ScaleGrad.apply(" in text and "= SplitScale.apply(" in text
    result = tv.autodiff(forward)
    runs = [b for b in result.augmented_forward.bound_symbols if b.sym.id == FORWARD_ID]
    assert [len(b.subsymbols) for b in runs] == [len(b.subsymbols) for b in calls]  # for viewing
    backward_text = str(result.backward)
    for name in ("ScaleGrad", "RoundSTE", "SplitScale", "Cube"):
        assert f"= {name}.backward(ctx" in backward_text
        assert f"= {name}.forward_with_ctx(" in str(result.augmented_forward)
    # printed traces run: the forward trace reproduces eager's output bit for bit
    params = [*model.parameters()]
    out = forward.python_callable()(x, *params)
    assert torch.equal(out, model(x))
    apply = Function.__dict__["apply"]  # torch's again: thunderviz's stand-in is gone
    assert getattr(apply, "__func__", None) is not function_apply._intercepted_apply


def test_a_wrong_user_backward_gives_that_wrong_gradient():
    torch.manual_seed(0)
    model, x = FunctionMLP(fns=("wrong",)), torch.randn(5, 6)
    value, grads = tv.value_and_grad(lambda x: WrongGrad.apply(x).sum())(x)
    assert torch.equal(grads[0], torch.full_like(x, 7.0))  # the user's 7, not the forward's 2
    jitted = tv.jit(copy.deepcopy(model))
    jitted(x).sum().backward()
    model(x).sum().backward()
    for pj, pe in zip(jitted.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(pj.grad, pe.grad, **TIGHT[torch.float32])


def test_value_and_grad_and_vjp_match_eager_in_float64():
    torch.manual_seed(0)
    model = FunctionMLP().double()
    x = torch.randn(4, 6, dtype=torch.float64)
    check_value_and_grad(Loss(model), x, **TIGHT[torch.float64])
    ct = torch.randn(4, 3, dtype=torch.float64)
    out, vjp_grads = tv.vjp(model)((x,), (ct,))
    xe = x.clone().requires_grad_(True)
    eager_out = model(xe)
    eager_out.backward(ct)
    torch.testing.assert_close(out, eager_out.detach(), **TIGHT[torch.float64])
    torch.testing.assert_close(vjp_grads[0], xe.grad, **TIGHT[torch.float64])


def test_the_debug_stepper_steps_through_the_users_backward():
    torch.manual_seed(0)
    model, x = FunctionMLP(), torch.randn(5, 6)
    session = tv.Session(Loss(model), x)
    stepper = session.new_stepper()
    records = []
    while not stepper.done:
        records.append(stepper.step())
    user_steps = [r for r in records if r.bsym.sym.id == BACKWARD_ID]
    assert [r.fwd_bsym.args[0].value.cls for r in user_steps] == [
        Cube,
        SplitScale,
        RoundSTE,
        ScaleGrad,
    ]
    _, expected = autograd_reference(Loss(model), x)
    for name, g in expected.items():
        torch.testing.assert_close(stepper.grads[name], g, **TIGHT[torch.float32], msg=name)
    assert all(c.allclose for c in session.compare_with_autograd())


class JvpOnly(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def jvp(ctx, t):
        return t * 3


class JvpOnlyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(3, 3), JvpOnlyLayer())

    def forward(self, x):
        return self.inner(x).sum()


class JvpOnlyLayer(nn.Module):
    def forward(self, x):
        return JvpOnly.apply(x)


def test_a_function_without_backward_is_refused_with_where_and_what_to_do():
    forward = tv.trace(JvpOnlyNet(), torch.randn(2, 3))
    with pytest.raises(AutodiffError) as err:
        tv.autodiff(forward)
    msg = str(err.value)
    assert "JvpOnly.apply" in msg and "test_custom_function.py" in msg
    assert "return JvpOnly.apply(x)" in msg and "in module 'inner.1'" in msg
    assert "backward staticmethod" in msg


def _in_place_on_a_tensor(x, w):
    h = x * w
    y = DoubleInPlace.apply(h)
    return (y * h + x).sum()  # y is h, which now holds the new value (as in eager)


def _in_place_on_a_view(x, w):
    h = x * w
    DoubleInPlace.apply(h[:, :2])  # the write reaches h
    return (h * h).sum()


@pytest.mark.parametrize("fn", [_in_place_on_a_tensor, _in_place_on_a_view])
def test_an_in_place_function_marking_its_input_dirty_matches_eager(fn):
    torch.manual_seed(0)
    x, w = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    value, grads = tv.value_and_grad(fn)(x, w)
    xe, we = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    loss = fn(xe, we)
    loss.backward()
    torch.testing.assert_close(value, loss.detach(), **TIGHT[torch.float64])
    torch.testing.assert_close(grads[0], xe.grad, **TIGHT[torch.float64])
    torch.testing.assert_close(grads[1], we.grad, **TIGHT[torch.float64])
    forward_only = tv.trace(fn, x, w).python_callable()(x.clone(), w)  # runs the user's apply
    torch.testing.assert_close(forward_only, loss.detach(), **TIGHT[torch.float64])
    xj, wj = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    tv.jit(fn)(xj, wj).backward()
    torch.testing.assert_close(xj.grad, xe.grad, **TIGHT[torch.float64])
    torch.testing.assert_close(wj.grad, we.grad, **TIGHT[torch.float64])


class WritesABuffer(Function):
    @staticmethod
    def forward(ctx, x, counter):
        counter.add_(1)  # not an argument it marks dirty: eager's autograd would not know
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


def test_a_function_writing_into_a_tensor_it_does_not_mark_dirty_is_refused():
    counter = torch.zeros(())

    def fn(x):
        return WritesABuffer.apply(x * 1, counter).sum()

    with pytest.raises(CaptureError) as err:
        tv.trace(fn, torch.randn(3, requires_grad=True))
    assert "WritesABuffer.apply" in str(err.value) and "ctx.mark_dirty" in str(err.value)
    assert "WritesABuffer.apply(x * 1, counter)" in err.value.source.code
    assert counter.item() == 0  # tracing wrote into a copy, never into the user's tensor


def test_other_threads_run_function_apply_as_usual_while_a_trace_runs():
    started, done = threading.Event(), threading.Event()
    seen = {}

    class Waits(Function):
        @staticmethod
        def forward(ctx, x):
            started.set()
            assert done.wait(10)
            return x + 1

        @staticmethod
        def backward(ctx, g):
            return g

    def other():
        assert started.wait(10)
        y = ScaleGrad.apply(torch.ones(3, requires_grad=True), 2.0)
        seen["grad_fn"] = type(y.grad_fn).__name__
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    forward = tv.trace(lambda x: Waits.apply(x), torch.ones(3, requires_grad=True))
    thread.join()
    assert seen["grad_fn"] == "ScaleGradBackward"  # eager's apply, not our recording
    assert [b.sym.id for b in forward.bound_symbols] == [APPLY_ID]


def test_fake_tracing_saved_tensor_hooks_and_the_view_document():
    torch.manual_seed(0)
    model, x = FunctionMLP(), torch.randn(5, 6)
    fake = tv.trace(Loss(model), x, fake=True)
    assert [b.sym.id for b in fake.bound_symbols].count(APPLY_ID) == 4
    document = tv.Session(Loss(model), x).document()
    assert document["traces"]
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t

    eager, jitted = copy.deepcopy(model), tv.jit(model)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mse(jitted(x)).backward()
        mse(eager(x)).backward()
    assert packed
    for pj, pe in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(pj.grad, pe.grad, **TIGHT[torch.float32])


class BlockGrad(Function):
    """Stops the gradient by returning None for an input that needs one."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return None


def test_a_none_gradient_for_an_input_that_needs_one_is_zeros_with_a_warning():
    torch.manual_seed(0)
    fc1, fc2 = nn.Linear(3, 3), nn.Linear(3, 1)

    def fn(x):
        return fc2(BlockGrad.apply(fc1(x))).sum()

    x = torch.randn(4, 3, requires_grad=True)
    with pytest.warns(
        UserWarning, match="BlockGrad.backward returned None as the gradient of input 0"
    ):
        _, grads = tv.value_and_grad(fn)(x)
    assert torch.equal(grads[0], torch.zeros_like(x))  # eager: x.grad stays None
    fn(x).backward()
    assert x.grad is None


SEEN: list[tuple[bool, bool]] = []


class TwoOutputs(Function):
    @staticmethod
    def forward(ctx, x, materialize):
        ctx.set_materialize_grads(materialize)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, g1, g2):
        SEEN.append((g1 is None, g2 is None))
        g = g1 * 2
        return (g if g2 is None else g + g2 * 3), None


@pytest.mark.parametrize("materialize", [True, False])
def test_an_output_no_gradient_reaches_is_zeros_or_none_as_the_ctx_says(materialize):
    def fn(x):
        a, _unused = TwoOutputs.apply(x * 1, materialize)
        return a.sum()

    x = torch.randn(3)
    SEEN.clear()
    _, grads = tv.value_and_grad(fn)(x)
    xe = x.clone().requires_grad_(True)
    fn(xe).backward()
    assert SEEN == [(False, not materialize)] * 2  # ours, then eager's: the same
    torch.testing.assert_close(grads[0], xe.grad, **TIGHT[torch.float32])


class DoubledTwice(Function):
    """A forward that returns one tensor at two places (`return y, y`), and a backward that
    reports what it was handed."""

    seen: list[tuple[bool, bool]] = []

    @staticmethod
    def forward(ctx, x):
        y = x * 2
        return y, y

    @staticmethod
    def backward(ctx, g1, g2):
        DoubledTwice.seen.append((bool(g1.any()), bool(g2.any())))
        return 2 * (g1 + g2)


def test_a_function_returning_one_tensor_twice_is_handed_its_gradient_once():
    """Eager autograd hands the whole gradient to the last place (zeros to the other, with
    materialized grads); each place had it whole, and the backward doubled it."""

    def program(x):
        a, b = DoubledTwice.apply(x)
        return (a + 3 * b).sum()

    x = torch.randn(4, dtype=torch.float64)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    DoubledTwice.seen.clear()
    program(theirs).backward()
    tv.jit(program)(ours).backward()
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=0, atol=0)
    assert DoubledTwice.seen == [(False, True), (False, True)]
