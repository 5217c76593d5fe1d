"""A program that asks a tensor whether it requires grad gets eager's answer while it is
traced (the tensors capture runs on never require grad; their proxies know). Checked against
eager."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv


def branches(x, w):
    h = x * w
    scale = 2.0 if h.requires_grad else 3.0
    frozen = 5.0 if x.requires_grad else 7.0
    with torch.no_grad():
        inside = 11.0 if (h * 1).requires_grad else 13.0
    return (h * (scale + frozen + inside)).sum()


@pytest.mark.parametrize("x_grad", [False, True])
@pytest.mark.parametrize("w_grad", [False, True])
def test_requires_grad_reads_take_eagers_branch(x_grad, w_grad):
    x = torch.randn(3, dtype=torch.float64, requires_grad=x_grad)
    w = torch.randn(3, dtype=torch.float64, requires_grad=w_grad)
    for run in (tv.jit(branches), lambda *a: tv.trace(branches, *a).python_callable()(*a)):
        torch.testing.assert_close(run(x, w), branches(x, w), rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(tv.jit(branches)(x, w), branches(x, w), rtol=0, atol=0)


def hooked(x):
    h = x * 1
    if h.requires_grad:  # eager registers the hook only when there is a gradient to hook
        h.register_hook(lambda g: g * 2)
    return (h * h).sum()


def test_a_branch_on_requires_grad_around_a_hook_takes_eagers_path():
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    hooked(x).backward()
    tv.jit(hooked)(y).backward()
    torch.testing.assert_close(y.grad, x.grad, rtol=0, atol=0)
    torch.testing.assert_close(tv.jit(hooked)(x.detach()), hooked(x.detach()), rtol=0, atol=0)


def fused_scale(x, w):
    """A function torch's function modes see as one call, as they see
    `F.linear_cross_entropy`, whose own body branches on requires_grad (that one picks
    whether its fused kernel computes gradients)."""
    if torch.overrides.has_torch_function_variadic(x, w):
        return torch.overrides.handle_torch_function(fused_scale, (x, w), x, w)
    product = x * w
    return product * (2.0 if x.requires_grad else 3.0) * (5.0 if product.requires_grad else 7.0)


@pytest.mark.skipif(
    not hasattr(torch._C, "_skip_one_hop_torch_function"),
    reason="torch 2.13 and later: before, a mode cannot run a torch function's own body",
)
@pytest.mark.parametrize("x_grad", [False, True])
@pytest.mark.parametrize("w_grad", [False, True])
def test_a_torch_functions_own_body_takes_eagers_branch(x_grad, w_grad):
    x = torch.randn(3, dtype=torch.float64, requires_grad=x_grad)
    w = torch.randn(3, dtype=torch.float64, requires_grad=w_grad)

    def program(x, w):
        return fused_scale(x * 1, w).sum()

    torch.testing.assert_close(tv.jit(program)(x, w), program(x, w), rtol=0, atol=0)


@pytest.mark.skipif(
    not hasattr(torch.nn.functional, "linear_cross_entropy"), reason="torch 2.13 and later"
)
def test_linear_cross_entropy_keeps_its_gradients():
    """Its chunked kernel computes the gradients in the forward only where the inputs
    require grad: read from the real tensors, it computed none."""
    torch.manual_seed(0)
    loss = torch.nn.LinearCrossEntropyLoss(
        5,
        4,
        reduction="sum",
        options=torch.nn.LinearCrossEntropyOptions(allow_retain_graph=True),
    ).double()
    x = torch.randn(8, 5, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 4, (8,))
    eager_x = x.detach().clone().requires_grad_()
    torch.autograd.backward(loss(eager_x, target))
    want = (eager_x.grad, loss.linear.weight.grad)
    loss.zero_grad(set_to_none=True)
    tv.jit(loss)(x, target).backward()
    torch.testing.assert_close((x.grad, loss.linear.weight.grad), want, rtol=1e-12, atol=1e-12)


class _Graphs(torch.nn.Module):
    """Asks `is_leaf` and `grad_fn` of an intermediate, a parameter, a factory's leaf and a
    value made a leaf inside, and branches on each (before, every tensor capture runs on
    read as a leaf without a `grad_fn`: the other branch, silently)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3, dtype=torch.float64)

    def forward(self, x):
        h = self.lin(x)
        made = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        leaf = (h * 1).detach().requires_grad_()
        scale = 1.0
        for k, answer in enumerate(
            (
                h.is_leaf,
                h.grad_fn is None,
                self.lin.weight.is_leaf,
                self.lin.weight.grad_fn is None,
                made.is_leaf,
                made.grad_fn is None,
                leaf.is_leaf,
                x.is_leaf,
                x.grad_fn is None,
            )
        ):
            scale = scale + (2**k if answer else 0)
        return (h * scale).sum() + (made * leaf).sum()


@pytest.mark.parametrize("entry", ["jit", "trace"])
def test_is_leaf_and_grad_fn_take_eagers_branch(entry):
    torch.manual_seed(0)
    model = _Graphs()
    x = torch.randn(2, 3, dtype=torch.float64)  # needs no gradient: a leaf whatever it is
    want = model(x)
    if entry == "jit":
        runs = [tv.jit(model)(x), tv.jit(model)(x)]
    else:
        runs = [tv.trace(model, x).python_callable()(x, *model.parameters())]
    for got in runs:
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_grad_fn_stands_in_for_a_node_and_says_so_when_used():
    def walks(x, w):
        h = x * w
        return h * 2 if h.grad_fn.name() else h

    x = torch.randn(3)
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(Exception, match=r"grad_fn\.name: a traced program's values have no"):
        tv.jit(walks)(x, w)


def test_is_leaf_of_an_argument_that_needs_a_gradient_is_refused():
    """Whether it is a leaf is the caller's, which a jitted call is not keyed by."""

    def asks(x):
        return x * (2 if x.is_leaf else 3)

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(tv.CaptureError, match=r"Tensor\.is_leaf at .*an argument that needs"):
        tv.jit(asks)(x)
