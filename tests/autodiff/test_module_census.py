"""torch's own module tests through `thunderviz.jit` (`benchmarks/module_census.py`): every
ModuleInfo of `module_db`, every input it makes, training and eval, two calls each, against
eager in float64; with cotangents that are not contiguous; a gradient penalty through each
(double backward), taken outside the call and inside it; and each under no_grad (inference).
The first test takes every input; the others at most `MOST` of each phase's, spread over the
list (`census.spread`): eleven modules make more (LinearCrossEntropyLoss 857, CrossEntropyLoss
105, the recurrent and transformer modules 32 to 67), and these took two thirds of the later
modes' time. `python -m benchmarks.module_census --mode ...` takes every input.
They are the nn modules users train, written by torch's authors, and they found a CTC loss
whose compiled forward read uninitialized memory, a torch decomposition of the wrong shape,
a fused loss that lost its gradients, kernels torch cannot differentiate twice, and
nn.Transformer's inference padding otherwise than eager's."""

from __future__ import annotations

import pytest
import torch

from benchmarks import module_census as census
from tests.helpers import install_user_rule
from thunderviz.prims import aten

MOST = 16  # inputs a phase of the modes after the first compares, at most


@pytest.mark.parametrize("info", census.module_infos(), ids=lambda info: info.name)
def test_module_agrees_with_eager(info):
    outcome = census.census_module(info, torch.float64)
    assert outcome.status in ("pass", "skipped"), outcome.detail


@pytest.mark.parametrize("info", census.module_infos(), ids=lambda info: info.name)
def test_module_agrees_with_eager_given_cotangents_that_are_not_contiguous(info):
    """What a transpose or slice after the module hands its backward."""
    outcome = census.census_module(info, torch.float64, "strided-backward", MOST)
    assert outcome.status in ("pass", "skipped"), outcome.detail


@pytest.mark.parametrize(
    "info",
    [info for info in census.module_infos() if info.supports_gradgrad],
    ids=lambda info: info.name,
)
def test_module_double_backward_agrees_with_eager(info):
    """A gradient penalty through each module (create_graph=True), differentiated again."""
    outcome = census.census_module(info, torch.float64, "double-backward", MOST)
    assert outcome.status in ("pass", "skipped"), outcome.detail


@pytest.mark.parametrize(
    "info",
    [info for info in census.module_infos() if info.supports_gradgrad],
    ids=lambda info: info.name,
)
def test_module_penalty_taken_inside_the_program_agrees_with_eager(info):
    """The same penalty, taken by `torch.autograd.grad(create_graph=True)` inside the traced
    program (`autodiff/inner_grad.py`), differentiated again."""
    outcome = census.census_module(info, torch.float64, "inner-grad", MOST)
    assert outcome.status in ("pass", "skipped"), outcome.detail


@pytest.mark.parametrize("info", census.module_infos(), ids=lambda info: info.name)
def test_module_inference_agrees_with_eager(info):
    """Under torch.no_grad() (jit runs its forward trace alone)."""
    outcome = census.census_module(info, torch.float64, "no-grad", MOST)
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


def test_each_mode_compares_what_it_names(monkeypatch):
    """A loop variable once replaced the mode, so every mode ran the plain backward."""
    (info,) = census.module_infos(["nn.Linear"])
    run, modes = census._run, set()

    def recording(module, call, module_input, step, mode):
        modes.add(mode)
        return run(module, call, module_input, step, mode)

    monkeypatch.setattr(census, "_run", recording)
    for mode in census.MODES:
        modes.clear()
        assert census.census_module(info, torch.float64, mode).status == "pass"
        assert modes == {mode}
    # and what each mode computes
    module_input = info.module_inputs_func(
        info, device="cpu", dtype=torch.float64, requires_grad=True, training=True
    )[0]
    module = info.module_cls(
        *module_input.constructor_input.args, **module_input.constructor_input.kwargs
    ).double()
    seen = {}
    for mode in census.MODES:
        call = census._penalised(module) if mode == "inner-grad" else module
        outs, grads, _ = run(module, call, module_input, 0, mode)
        seen[mode] = (outs[0].requires_grad, len(grads))
    n = 1 + len(list(module.parameters()))  # the input's gradient, the parameters'
    assert seen == {
        "backward": (True, n),
        "strided-backward": (True, n),
        "double-backward": (True, 1 + n),  # the penalty first
        "inner-grad": (True, 1 + n),  # the penalty, taken inside the program, first
        "no-grad": (False, 0),
    }


@pytest.mark.parametrize("length", [32, 35, 39, 40, 64, 67, 105, 857])
def test_a_spread_meets_every_value_of_each_small_option(length):
    """The inputs a capped phase compares (the input list lengths module_db makes): `most`
    different ones in their order, the first included, spanning the list, and each value of
    an option that cycles with period 2, 3, 4, 6 or 8 met."""
    inputs = list(range(length))
    kept = census.spread(inputs, MOST)
    assert len(set(kept)) == len(kept) == MOST and kept == sorted(kept) and kept[0] == 0
    assert kept[-1] >= length - length // MOST - 1, kept  # (no tail of the list left out)
    for period in (2, 3, 4, 6, 8):
        assert {i % period for i in kept} == set(range(period)), period
    assert census.spread(inputs[:MOST], MOST) == inputs[:MOST]
