"""`torch.library.custom_op`s with their own autograd formula (`register_autograd`), through
`jit`: their registered backward is the one that runs, as in eager, whatever it computes.
Every check is against eager on the same op."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv
from tests.helpers import value_and_grads
from thunderviz.autodiff.errors import AutodiffError


@torch.library.custom_op("thunderviz_test::scaled", mutates_args=())
def scaled(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s


@scaled.register_fake
def _(x, s):
    return torch.empty_like(x)


def _scaled_setup(ctx, inputs, output):
    ctx.s = inputs[1]


def _scaled_backward(ctx, g):
    # deliberately not the derivative of x * s: the registered backward is the truth
    return g * ctx.s * 3, None


scaled.register_autograd(_scaled_backward, setup_context=_scaled_setup)


@torch.library.custom_op("thunderviz_test::gated", mutates_args=())
def gated(
    x: torch.Tensor, w: torch.Tensor, *, bias: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor]:
    gate = (x > 0).to(x.dtype)
    return x * w * gate + bias, gate


@gated.register_fake
def _(x, w, *, bias=0.5):
    return torch.empty_like(x), torch.empty_like(x)


def _gated_setup(ctx, inputs, keyword_only_inputs, output):
    x, w = inputs
    ctx.save_for_backward(x, w, output[1])
    ctx.bias = keyword_only_inputs["bias"]
    ctx.mark_non_differentiable(output[1])


def _gated_backward(ctx, g, _g_gate):
    x, w, gate = ctx.saved_tensors
    gx = g * w * gate if ctx.needs_input_grad[0] else None
    gw = g * x * gate if ctx.needs_input_grad[1] else None
    return gx, gw


gated.register_autograd(_gated_backward, setup_context=_gated_setup)


@torch.library.custom_op("thunderviz_test::no_formula", mutates_args=())
def no_formula(x: torch.Tensor) -> torch.Tensor:
    return x.sin()


@no_formula.register_fake
def _(x):
    return torch.empty_like(x)


def through_scaled(x):
    return scaled(x.sin(), 2.0).sum()


def through_gated(x, w):
    out, gate = gated(x.cos(), w, bias=0.25)
    return (out * out).sum() + gate.sum()


def _check(fn, *args):
    (want, want_grads), (got, got_grads) = (value_and_grads(f, *args) for f in (fn, tv.jit(fn)))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_grads, want_grads, rtol=1e-12, atol=1e-12)


def test_the_registered_backward_runs_as_in_eager():
    _check(through_scaled, torch.randn(5, dtype=torch.float64, requires_grad=True))


@pytest.mark.parametrize("w_grad", [False, True])
def test_saved_tensors_keyword_only_inputs_and_a_non_differentiable_output(w_grad):
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=w_grad)
    _check(through_gated, x, w)


def test_every_call_after_the_first_too():
    jitted = tv.jit(through_gated)
    for _ in range(3):
        x = torch.randn(6, dtype=torch.float64, requires_grad=True)
        w = torch.randn(6, dtype=torch.float64, requires_grad=True)
        (want, want_grads) = value_and_grads(through_gated, x, w)
        (got, got_grads) = value_and_grads(jitted, x, w)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got_grads, want_grads, rtol=1e-12, atol=1e-12)


def test_the_trace_names_the_op_and_whose_backward_runs():
    text = tv.trace(through_scaled, torch.randn(5, requires_grad=True)).python(print_depth=3)
    assert "custom op thunderviz_test::scaled: its backward is the one" in text
    assert "thunderviz_test.scaled" in text  # the op itself, beneath the call


def test_without_a_gradient_the_op_is_recorded_as_it_is():
    with torch.no_grad():
        trace = tv.trace(through_scaled, torch.randn(5))
    assert "register_autograd" not in trace.python()
    x = torch.randn(5)
    with torch.no_grad():
        torch.testing.assert_close(tv.jit(through_scaled)(x), through_scaled(x))


def test_an_op_without_a_formula_is_refused_with_its_name():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(AutodiffError, match="thunderviz_test.no_formula"):
        tv.jit(lambda x: no_formula(x).sum())(x).backward()


def test_an_op_without_a_formula_whose_output_carries_no_gradient_onwards_is_not_refused():
    """As eager: an op with no derivative stops a program only when its backward reaches it;
    read through `.detach()`, its output is a constant there."""

    def fn(x):
        return (x * no_formula(x).detach()).sum()

    _check(fn, torch.randn(5, dtype=torch.float64, requires_grad=True))


# torch's own fused loss (torch 2.13): with `options`, a custom op whose registered backward
# returns gradients its forward computed, under `.detach()` (torch: no double backward)
_FUSED = getattr(torch.nn, "LinearCrossEntropyOptions", None)


def _fused_loss() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.LinearCrossEntropyLoss(
        5, 4, reduction="sum", options=_FUSED(allow_retain_graph=True)
    ).double()


@pytest.mark.skipif(_FUSED is None, reason="this torch has no LinearCrossEntropyOptions")
def test_a_custom_ops_autograd_kernel_reached_by_a_traced_call_whose_inputs_require_grad():
    """A module read from outside the traced function runs on its own parameters, which
    require grad: eager's autograd kernel of the op runs its own Function.apply, with the
    recorder's torch-function mode already off the stack."""
    loss, x = _fused_loss(), torch.randn(8, 5, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 4, (8,))
    trace = tv.trace(lambda x: loss(x, y), x)
    assert "_linear_cross_entropy_batch_chunked" in trace.python(print_depth=2)
    _check(lambda x: loss(x, y), x)


@pytest.mark.skipif(_FUSED is None, reason="this torch has no LinearCrossEntropyOptions")
@pytest.mark.parametrize("create_graph", [False, True])
def test_a_gradient_taken_inside_the_program_through_a_custom_op(create_graph):
    """The inner backward's code calls the op from its own namespace (bound in the generated
    module); with create_graph, eager's answer, whose fused gradients are constants."""
    loss, y = _fused_loss(), torch.randint(0, 4, (8,))

    def penalised(x, w):
        value = loss(x * w, y)
        (g,) = torch.autograd.grad(value, x, create_graph=create_graph, retain_graph=True)
        return value + (g**2).sum()

    x = torch.randn(8, 5, dtype=torch.float64, requires_grad=True)
    _check(penalised, x, torch.randn(5, dtype=torch.float64, requires_grad=True))
