"""A fast slice of `benchmarks/opinfo_census.py` (the whole census takes a minute or two:
run it by hand). It checks the census machinery on a few OpInfos of different families, and
that a wrong gradient is reported as wrong."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv
from benchmarks import opinfo_census as census
from tests.helpers import install_user_rule
from thunderviz.prims import aten

SLICE = ["sin", "matmul", "sort", "nn.functional.group_norm", "cumsum", "index_select"]


@pytest.mark.parametrize("info", census.autograd_opinfos(SLICE), ids=census.label_of)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_census_slice_passes(info, dtype):
    outcome = census.census_opinfo(info, dtype)
    assert outcome.status == "pass", outcome.detail


def test_every_opinfo_agrees_given_cotangents_that_are_not_contiguous():
    """What a transpose or slice after an op hands its backward. Backward kernels read
    memory as contiguous unless the rule makes it so, as eager's autograd does (group_norm's
    CPU kernel read a transposed gradient as if it were not: a wrong input gradient)."""
    outcomes = census.run(torch.float64, census.autograd_opinfos(), strided=True)
    wrong = [f"{o.label}: {o.detail}" for o in outcomes if o.status == "wrong"]
    assert not wrong, wrong
    assert sum(o.status == "pass" for o in outcomes) > 450


# Where torch's own gradient disagrees with finite differences and thunderviz's does not:
# as_strided_scatter's formula (an input overlapping itself); native_layer_norm called as
# the ATen op, whose mean and rstd outputs eager does not differentiate (F.layer_norm's
# one output agrees)
_EAGER_DIFFERS_AT_EDGES = {"as_strided_scatter", "native_layer_norm"}


def test_every_opinfo_agrees_at_ties_and_zeros():
    """Every sample's values rounded to halves (`--at-edges`): ties, zeros, probabilities of
    0 and 1, where a gradient is a convention and eager's is the one to give, nan and inf
    included (finite differences settle nothing there). Four OpInfos disagreed on their
    first three samples: nextafter, binary_cross_entropy, normal twice (`--samples 6` finds
    atan2, multi_margin_loss and xlog1py too, and a rank-deficient lstsq whose LAPACK
    solution is not the same from run to run: tests/autodiff/test_rules_at_edges.py)."""
    infos = [
        i for i in census.autograd_opinfos() if census.label_of(i) not in _EAGER_DIFFERS_AT_EDGES
    ]
    outcomes = census.run(torch.float64, infos, at_edges=True)
    wrong = [f"{o.label}: {o.detail}" for o in outcomes if o.status == "wrong"]
    assert not wrong, wrong
    assert sum(o.status == "pass" for o in outcomes) > 480


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_a_wrong_rule_is_reported_wrong(monkeypatch, dtype):
    """A user rule with a sign error (user rules win over the built-ins): the census must
    say `wrong`, not pass; in float32 too, where the float64 arbiter settles rounding only."""
    install_user_rule(
        monkeypatch,
        aten.sin.default,
        lambda g, a, out: aten.mul.Tensor(g, aten.neg.default(aten.cos.default(a))),
    )
    (info,) = census.autograd_opinfos(["sin"])
    assert census.census_opinfo(info, dtype).status == "wrong"


def test_missing_rules_are_ranked_by_opinfos_blocked():
    outcomes = [
        census.Outcome("a", "no-rule", missing=["x", "y"]),
        census.Outcome("b", "no-rule", missing=["x"]),
        census.Outcome("b", "no-rule", missing=["x"]),
    ]  # same OpInfo, other dtype
    assert census.rank_missing(outcomes) == [("x", 2), ("y", 1)]


COMPLEX_SLICE = ["mul", "abs", "matmul", "sgn", "linalg.vector_norm", "fft.fft", "exp", "vdot"]


@pytest.mark.parametrize("info", census.autograd_opinfos(COMPLEX_SLICE), ids=census.label_of)
def test_census_complex128_slice_passes(info):
    outcome = census.census_opinfo(info, torch.complex128)
    assert outcome.status == "pass", outcome.detail


def test_an_op_refused_for_complex_counts_as_error_not_pass(monkeypatch):
    # a rule for real numbers only (a user rule without supports_complex wins over exp's)
    install_user_rule(monkeypatch, aten.exp.default, lambda g, a, out: aten.mul.Tensor(g, out))
    (info,) = census.autograd_opinfos(["exp"])
    outcome = census.census_opinfo(info, torch.complex128)
    assert outcome.status == "error" and "aten.exp.default" in outcome.detail


def test_complex_disagreements_are_settled_by_finite_differences():
    """torch 2.13's derivative of as_strided_scatter's `self` is wrong (it fails torch's own
    gradcheck); the arbiter differentiates the real and imaginary parts apart and sides
    with thunderviz, saying so."""
    (info,) = census.autograd_opinfos(["as_strided_scatter"])
    outcome = census.census_opinfo(info, torch.complex128)
    assert outcome.status == "pass", outcome.detail
    assert "disagrees with finite differences" in outcome.detail


def test_a_wrong_complex_rule_is_reported_wrong_though_the_arbiter_runs(monkeypatch):
    """exp's gradient without the conjugate (right for real numbers only): finite
    differences side with autograd, so the census says `wrong`."""
    from thunderviz.autodiff.api import user_rules
    from thunderviz.autodiff.registry import RuleSet

    rules = RuleSet("a wrong complex rule", supports_complex=True)

    @rules.grad(aten.exp.default)
    def exp(a):
        out = aten.exp.default(a)
        tv.put_grad(a, aten.mul.Tensor(tv.get_grad(out), out))  # should be conj(out)
        return out

    monkeypatch.setitem(user_rules.rules, aten.exp.default.id, rules.rules[aten.exp.default.id])
    (info,) = census.autograd_opinfos(["exp"])
    assert census.census_opinfo(info, torch.complex128).status == "wrong"


def test_float32_rounding_is_settled_against_float64():
    """A second derivative through bicubic weights sums terms of ~1e5 that nearly cancel:
    thunderviz's float32 and torch's both miss the float64 value by more than the float32
    tolerance, by the same few ulps. The census asks torch.autograd in float64 which is
    nearer, instead of calling that wrong."""
    (info,) = census.autograd_opinfos(["grid_sampler_2d"])
    outcome = census.census_opinfo(info, torch.float32, n_samples=15, second_order=True)
    assert outcome.status == "pass", outcome.detail
    assert "float32 rounding" in outcome.detail
