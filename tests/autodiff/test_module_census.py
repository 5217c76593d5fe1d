"""torch's own module tests through `thunderviz.jit` (`benchmarks/module_census.py`): every
ModuleInfo of `module_db`, every input it makes, training and eval, two calls each, against
eager in float64; a gradient penalty through each (double backward); and each under no_grad
(inference). About two minutes for all 114. They are the nn modules users train, written by
torch's authors, and they found a CTC loss whose compiled forward read uninitialized memory,
a torch decomposition of the wrong shape, a fused loss that lost its gradients, kernels
torch cannot differentiate twice, and nn.Transformer's inference padding otherwise than
eager's."""

from __future__ import annotations

import pytest
import torch

from benchmarks import module_census as census
from tests.helpers import install_user_rule
from thunderviz.prims import aten


@pytest.mark.parametrize("info", census.module_infos(), ids=lambda info: info.name)
def test_module_agrees_with_eager(info):
    outcome = census.census_module(info, torch.float64)
    assert outcome.status in ("pass", "skipped"), outcome.detail


@pytest.mark.parametrize(
    "info",
    [info for info in census.module_infos() if info.supports_gradgrad],
    ids=lambda info: info.name,
)
def test_module_double_backward_agrees_with_eager(info):
    """A gradient penalty through each module (create_graph=True), differentiated again."""
    outcome = census.census_module(info, torch.float64, "double-backward")
    assert outcome.status in ("pass", "skipped"), outcome.detail


@pytest.mark.parametrize("info", census.module_infos(), ids=lambda info: info.name)
def test_module_inference_agrees_with_eager(info):
    """Under torch.no_grad() (jit runs its forward trace alone)."""
    outcome = census.census_module(info, torch.float64, "no-grad")
    assert outcome.status in ("pass", "skipped"), outcome.detail


def test_a_wrong_gradient_is_reported_wrong(monkeypatch):
    """A user rule with a sign error (user rules win over the built-ins): the census must
    say `wrong`, not pass."""
    install_user_rule(
        monkeypatch,
        aten.tanh.default,
        lambda g, a, out: aten.neg.default(aten.tanh_backward.default(g, out)),
    )
    (info,) = census.module_infos(["nn.Tanh"])
    outcome = census.census_module(info, torch.float64)
    assert outcome.status == "wrong" and "gradient" in outcome.detail
