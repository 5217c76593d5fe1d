"""A backward with create_graph=True through a jitted call (a gradient penalty, a
physics-informed du/dx, a Hessian-vector product) gives gradients that can be
differentiated again, to eager's values: checked against eager in float64 (to 1e-10: the
second derivative sums in another order), with dropout (the recomputation draws the same
mask) and BatchNorm (its running statistics are updated once, as in eager)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from tests.autodiff.custom_function_models import DoubleInPlace
from tests.helpers import DEVICES

F64 = dict(dtype=torch.float64)
CLOSE = dict(rtol=1e-10, atol=1e-10)


def _critic():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Dropout(0.3), nn.Linear(8, 1)
    ).double()


def _penalised_step(model, x):
    """WGAN-GP's critic loss: the output, plus the penalty on the input gradient's norm."""
    x = x.detach().requires_grad_()
    out = model(x).sum()
    (g,) = torch.autograd.grad(out, x, create_graph=True)
    loss = out + ((g.norm(dim=1) - 1) ** 2).mean()
    loss.backward()
    return loss.detach(), x.grad


def _penalised_steps_like_eager(eager: nn.Module) -> None:
    """Two penalised steps of `eager` and of a jitted copy: losses, input gradients and
    parameter gradients alike."""
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    for _ in range(2):
        x = torch.randn(6, 4, **F64)
        want, got = _penalised_step(eager, x), _penalised_step(jitted, x)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, **CLOSE)
        for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, **CLOSE, msg=name)
            p.grad = q.grad = None


@pytest.mark.parametrize("device", DEVICES)
def test_a_gradient_penalty_trains_like_eager_with_dropout_and_batchnorm(device):
    eager = _critic().to(device)
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    for step in range(3):
        x = torch.randn(6, 4, **F64, device=device)
        torch.manual_seed(step)
        want = _penalised_step(eager, x)
        torch.manual_seed(step)
        got = _penalised_step(jitted, x)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, **CLOSE)
        for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, **CLOSE, msg=name)
            p.grad = q.grad = None
        for (name, b), c in zip(eager.named_buffers(), ours.buffers(), strict=True):
            torch.testing.assert_close(c, b, **CLOSE, msg=name)  # updated once a step
    assert jitted.cache_misses == 1


@pytest.mark.parametrize(
    "activation_and_norm",
    [(nn.SiLU, nn.Identity), (nn.Mish, nn.Identity), (nn.Tanh, lambda: nn.GroupNorm(2, 8))],
    ids=["silu", "mish", "group_norm"],
)
def test_a_gradient_penalty_through_kernels_torch_differentiates_once(activation_and_norm):
    """silu_backward, mish_backward and native_group_norm_backward have no derivative in
    torch (eager switches to twice-differentiable composites when the graph is kept); the
    backward that keeps a graph runs their decompositions."""
    activation, norm = activation_and_norm
    torch.manual_seed(0)
    _penalised_steps_like_eager(
        nn.Sequential(nn.Linear(4, 8), norm(), activation(), nn.Linear(8, 1)).double()
    )


def test_a_hessian_vector_product_through_jit_is_eagers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.GELU(), nn.Linear(5, 1)).double()

    def hvp(fn, x, v):
        x = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
        (hv,) = torch.autograd.grad((g * v).sum(), x)
        return hv

    x, v = torch.randn(4, 3, **F64), torch.randn(4, 3, **F64)
    torch.testing.assert_close(hvp(tv.jit(model), x, v), hvp(model, x, v), **CLOSE)


class _Swish(torch.autograd.Function):
    """A custom activation saving its input: its backward reads `x`, so the penalty's second
    derivative goes through `x` (the input itself, as eager saves it)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * (s + x * s * (1 - s))


class _HalfGrad(torch.autograd.Function):
    """The identity, whose backward halves the gradient: the second derivative of what
    reads its output (`tanh`, next) goes back through it, as through eager's node."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 0.5


class _Sigmoid(torch.autograd.Function):
    """Saves its output: eager's saved output keeps the Function's node, so the backward's
    `g * s * (1 - s)` is differentiated again through `s` (jit took it as a constant)."""

    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, g):
        (s,) = ctx.saved_tensors
        return g * s * (1 - s)


class _WithFunctions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, x):
        h = torch.tanh(_HalfGrad.apply(_Swish.apply(DoubleInPlace.apply(self.a(x)))))
        return self.b(_Sigmoid.apply(h))


class _GaussianHead(nn.Module):
    """`gaussian_nll_loss` clamps a copy of its variance under no_grad inside its call."""

    def __init__(self) -> None:
        super().__init__()
        self.mean, self.var = nn.Linear(4, 1), nn.Linear(4, 1)

    def forward(self, x):
        var = self.var(x).pow(2) * 1e-6  # below eps, often
        return nn.functional.gaussian_nll_loss(self.mean(x), x.sum(1, keepdim=True), var) * 1e-3


class _ClippedCritic(nn.Module):
    """Weight clipping in the forward (the original WGAN's), under no_grad: the recompute
    reads the weight as it was before the first run clipped it, and its gradient still goes
    to the weight itself (it went to a copy: the penalty's part of it was lost)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, x):
        with torch.no_grad():
            self.a.weight.clamp_(-0.3, 0.3)
        return self.b(torch.tanh(self.a(x)))


class _HookedCritic(nn.Module):
    """A hook scaling an activation's gradient, registered in the forward: eager's hook is on
    the tensor, so the penalty's second backward passes it too, including the gradient that
    reaches the activation through what tanh's own backward saved (its output)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        h.register_hook(lambda g: g * 3)
        return self.b(h * h)


@pytest.mark.parametrize(
    "make",
    [_WithFunctions, _GaussianHead, _ClippedCritic, _HookedCritic],
    ids=["functions", "gaussian", "clipped", "hooked"],
)
def test_a_gradient_penalty_through_user_functions_is_eagers(make):
    """A jitted call runs a user Function outside autograd; the recompute for create_graph
    joins it into the graph as `Function.apply` does (capture/function_graph.py). Before,
    the penalty lost the Functions' part of the second derivative, without a word."""
    torch.manual_seed(0)
    _penalised_steps_like_eager(make().double())
