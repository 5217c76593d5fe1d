"""Gradients where formulas meet their edges, against torch.autograd in float64: the origin
of atan2, predictions of exactly 0 and 1 in binary cross-entropy, ties in the margin loss,
x = 0 in xlog1py, entr and sinc, a == b in nextafter, an all -inf prefix in logcumsumexp.

Each was found by running torch's OpInfo samples with their values rounded to halves (ties,
zeros, saturated probabilities): differentiating torch's decompositions gave nan, or 0, or
a finite value where eager's formula (derivatives.yaml) gives another. A debugger that shows
0 where the user's training gets nan, or nan where it gets a number, lies about where a nan
comes from. The last tests are on gradients eager gives as zeros, not none (an optimizer
steps a parameter whose `.grad` is zeros and skips one whose `.grad` is None), and on the
outputs whose `requires_grad` eager leaves False.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import thunderviz as tv
from tests.helpers import check_vjp

F64 = dict(dtype=torch.float64)
INF, NAN = math.inf, math.nan


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, **F64)


def test_atan2_at_the_origin_and_where_the_radius_underflows():
    """1/r² is inf there; eager takes it as 0, so both gradients are 0, not nan."""
    check_vjp(
        torch.atan2, _t(0.0, 1e-200, 1e-200, 0.0, INF, 1.0), _t(0.0, 1e-200, 0.0, -0.0, 1.0, 2.0)
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_of_saturated_predictions(reduction):
    """x of exactly 0 or 1 (a sigmoid saturated in float32): eager's kernel divides by
    max(x(1-x), 1e-12), a large finite gradient; the target's gradient, -logit(x), is
    infinite there, as eager's."""
    x, y = _t(0.0, 1.0, 0.5, 0.25, 1.0), _t(1.0, 0.0, 1.0, 0.3, 1.0)
    weight = _t(1.0, 2.0, 3.0, 4.0, 0.5)
    check_vjp(lambda x, y: F.binary_cross_entropy(x, y, reduction=reduction), x, y)
    check_vjp(lambda x: F.binary_cross_entropy(x, y, weight, reduction=reduction), x)


def test_binary_cross_entropy_refuses_a_weight_that_requires_grad_as_eager_does():
    x = torch.tensor([0.2, 0.7], **F64, requires_grad=True)
    weight = torch.ones(2, **F64, requires_grad=True)
    loss = lambda x, w: F.binary_cross_entropy(x, torch.ones(2, **F64), w)  # noqa: E731
    with pytest.raises(RuntimeError, match="weight"):
        loss(x, weight)
    with pytest.raises(Exception, match="weight"):
        tv.jit(loss)(x, weight).backward()


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multi_margin_loss_at_ties(p, reduction):
    """A score exactly at the margin from the target's: eager's kernel does not count it."""
    scores = _t(1.0, 2.0, 3.0, 3.0, 3.0, 3.0).reshape(2, 3)
    target = torch.tensor([2, 0])
    check_vjp(lambda s: F.multi_margin_loss(s, target, p=p, reduction=reduction), scores)
    check_vjp(
        lambda s: F.multi_margin_loss(s, target, p=p, margin=0.5, weight=_t(1.0, 2.0, 3.0)),
        scores,
    )


def test_xlog1py_at_zero():
    """dx = g log1p(y), 0 only where x == 0 and y <= -1 (not wherever x == 0)."""
    x, y = _t(0.0, 0.0, 1.0, 0.0, 2.0), _t(0.5, -1.0, 0.0, -2.0, 3.0)
    check_vjp(torch.special.xlog1py, x, y)
    check_vjp(torch.special.xlog1py, x.reshape(5, 1), y)  # broadcast
    for number in (2.0, -1.0, -3.0):
        check_vjp(lambda x, number=number: torch.special.xlog1py(x, number), x)
        check_vjp(lambda y, number=number: torch.special.xlog1py(number, y), y)


def test_entr_sinc_and_nextafter_at_their_edges():
    check_vjp(torch.special.entr, _t(0.0, 1.0, -1.0, 0.5))  # inf at 0
    check_vjp(torch.sinc, _t(0.0, 1.0, 0.3, 1e-200))  # 0 at 0
    check_vjp(torch.nextafter, _t(1.0, 2.0, 3.0, NAN), _t(1.0, 3.0, 2.0, 1.0))  # 0 at a == b


def test_logcumsumexp_over_a_prefix_of_minus_infinity():
    """The output is -inf there, and eager's gradient nan: a training run that masks with
    -inf gets nan, and so must its debugger."""
    check_vjp(lambda a: torch.logcumsumexp(a, 0), _t(-INF, -INF, 0.0, -INF, 2.0))
    check_vjp(lambda a: torch.logcumsumexp(a, 1), torch.randn(3, 5, **F64) * 100)


def test_addr_with_beta_zero_gives_its_input_a_zero_gradient():
    """torch's decomposition drops the input when beta is 0; eager's gradient is g * 0."""
    c, u, v = torch.randn(3, 4, **F64), torch.randn(3, **F64), torch.randn(4, **F64)
    for kwargs in ({"beta": 0}, {"alpha": 0}, {"beta": 0.5, "alpha": 2.0}, {}):
        check_vjp(lambda c, u, v, kwargs=kwargs: torch.addr(c, u, v, **kwargs), c, u, v)
    check_vjp(lambda c, u, v: torch.addr(c, u, v, beta=0), torch.randn(4, **F64), u, v)


OVERWRITES_AND_DRAWS = {
    "fill_": lambda a: a.clone().fill_(1.0),
    "fill_ with a tensor": lambda a: a.clone().fill_(torch.tensor(2.0, **F64)),
    "zero_": lambda a: a.clone().zero_(),
    "copy_": lambda a: a.clone().copy_(torch.ones(3, **F64)),
    "torch.bernoulli": torch.bernoulli,
    "bernoulli_": lambda a: a.clone().bernoulli_(0.5),
    "uniform_": lambda a: a.clone().uniform_(),
    "normal_": lambda a: a.clone().normal_(),
    "exponential_": lambda a: a.clone().exponential_(),
    "geometric_": lambda a: a.clone().geometric_(0.5),
    "cauchy_": lambda a: a.clone().cauchy_(),
    "log_normal_": lambda a: a.clone().log_normal_(),
    "random_": lambda a: a.clone().random_(0, 3),
    "poisson": torch.poisson,
}
# Draws whose parameters are tensors: `torch.normal`'s gradient is zeros in eager (not the
# reparameterized one of its decomposition, mean + std * noise, which jit gave); Gamma's is
# the implicit reparameterization (`_standard_gamma_grad`, which jit refused)
DRAWS_WITH_PARAMETERS = {
    "normal(mean, std)": lambda a: torch.normal(a, a),
    "normal(mean, 1.0)": lambda a: torch.normal(a, 1.0),
    "normal(0.0, std)": lambda a: torch.normal(0.0, a),
    "normal(mean, std) * mean": lambda a: torch.normal(a, a) * a,
    "Gamma.rsample": lambda a: torch.distributions.Gamma(a, 1.0).rsample((4,)),
    "Beta.rsample": lambda a: torch.distributions.Beta(a, 2 * a).rsample(),
}
FACTORIES = {
    "zeros_like": torch.zeros_like,
    "ones_like": torch.ones_like,
    "full_like": lambda a: torch.full_like(a, 2.0),
    "empty_like, filled": lambda a: torch.empty_like(a).fill_(1.0),
    "new_zeros": lambda a: a.new_zeros(3),
    "new_full": lambda a: a.new_full((3,), 1.0),
    "rand_like": torch.rand_like,
    "randn_like": torch.randn_like,
    "detach": torch.Tensor.detach,
}


def _eager_and_jit(fn):
    """(output, gradient or None) of `fn` on a leaf, in eager and under jit, same seed."""
    results = []
    for run in (fn, tv.jit(fn)):
        x = _t(0.3, 0.6, 0.9).requires_grad_()
        torch.manual_seed(0)
        out = run(x)
        grad = (
            torch.autograd.grad(out.sum(), x, allow_unused=True)[0] if out.requires_grad else None
        )
        results.append((out.detach(), out.requires_grad, grad))
    return results


@pytest.mark.parametrize("name", list(OVERWRITES_AND_DRAWS))
def test_overwrites_and_draws_give_zeros_not_none(name):
    (out, needs, grad), (jit_out, jit_needs, jit_grad) = _eager_and_jit(OVERWRITES_AND_DRAWS[name])
    assert needs and jit_needs
    torch.testing.assert_close(jit_out, out, rtol=0, atol=0)
    assert grad is not None and jit_grad is not None
    torch.testing.assert_close(jit_grad, grad, rtol=0, atol=0)


@pytest.mark.parametrize("name", list(DRAWS_WITH_PARAMETERS))
def test_draws_with_tensor_parameters_differentiate_as_eagers_do(name):
    (out, needs, grad), (jit_out, jit_needs, jit_grad) = _eager_and_jit(DRAWS_WITH_PARAMETERS[name])
    assert needs and jit_needs
    torch.testing.assert_close(jit_out, out, rtol=0, atol=0)
    torch.testing.assert_close(jit_grad, grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(FACTORIES))
def test_factories_of_a_tensor_that_requires_grad_do_not(name):
    """eager's `torch.zeros_like(x).requires_grad` is False: a jitted call returning one
    must not hand the user a tensor that requires grad (`.numpy()` on it would raise)."""
    (out, needs, _), (jit_out, jit_needs, _) = _eager_and_jit(FACTORIES[name])
    assert not needs and not jit_needs
    torch.testing.assert_close(jit_out, out, rtol=0, atol=0)
