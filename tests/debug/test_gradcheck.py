"""Session.gradcheck / check_gradients: recorded backward against torch.autograd and finite
differences; a deliberately wrong user rule is flagged, correct rules pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from tests.debug.models import line_of
from thunderviz.autodiff.api import user_rules
from thunderviz.models import GPT, GPTConfig
from thunderviz.prims import aten


def _program(x, w):
    h = torch.cosh(x @ w)
    return (h + torch.sinh(h)).sum()


@pytest.fixture
def user_rules_for_sinh_and_cosh():
    @tv.register_grad(aten.sinh.default)
    def wrong_sinh(a):  # d sinh = cosh, not sinh: the deliberate mistake
        out = aten.sinh.default(a)
        tv.put_grad(a, aten.mul.Tensor(tv.get_grad(out), aten.sinh.default(a)))
        return out

    @tv.register_grad(aten.cosh.default)
    def right_cosh(a):
        out = aten.cosh.default(a)
        tv.put_grad(a, aten.mul.Tensor(tv.get_grad(out), aten.sinh.default(a)))
        return out

    yield
    user_rules.rules.pop("aten.sinh.default")
    user_rules.rules.pop("aten.cosh.default")


def _inputs():
    gen = torch.Generator().manual_seed(0)
    return (
        torch.randn(3, 4, generator=gen, dtype=torch.float64) * 0.5,
        torch.randn(4, 2, generator=gen, dtype=torch.float64, requires_grad=True),
    )


def test_a_wrong_user_rule_is_flagged_and_a_right_one_passes(user_rules_for_sinh_and_cosh):
    s = tv.Session(_program, *_inputs())
    report = s.check_gradients()
    first = report.first_failure
    assert first is not None and first.op == "torch.sinh"
    assert first.source.lineno == line_of(_program, "torch.sinh")
    (name,) = first.error
    assert first.error[name] > 1e-3
    # finite differences side with autograd against the recorded backward
    assert first.fd[name] == pytest.approx(first.fd_autograd[name], rel=1e-6)
    assert abs(first.fd_recorded[name] - first.fd[name]) > 1e-3 * abs(first.fd[name])
    by_op = {c.op: c for c in report.checks}
    assert by_op["torch.cosh"].ok and by_op["torch.Tensor.matmul"].ok
    assert not report.ok


def test_correct_rules_pass_and_targets_name_one_op():
    s = tv.Session(_program, *_inputs())
    report = s.check_gradients()
    assert report.ok and all(c.ok for c in report.checks) and len(report.checks) == 5
    sinh = next(b for b in s.forward.bound_symbols if b.sym.id == "torch.sinh")
    i = s.forward.bound_symbols.index(sinh)
    backward_of_sinh = next(b for b in s.backward.bound_symbols if b.fwd_bsym is sinh)
    j = s.backward.bound_symbols.index(backward_of_sinh)
    targets = (sinh, f"forward:{i}", f"forward:{i}.0", backward_of_sinh, f"backward:{j}")
    for target in (*targets, sinh.subsymbols[0]):
        check = s.gradcheck(target)
        assert check.op_id == f"forward:{i}" and check.ok
    for bad in (f"forward:{i}.x", "forward:-1", f"module:{i}"):
        with pytest.raises(ValueError, match="not an op id"):
            s.gradcheck(bad)
    # the recorded gradient is autograd's, up to float64 rounding
    (name,) = check.recorded
    torch.testing.assert_close(check.recorded[name], check.autograd[name], rtol=1e-12, atol=1e-14)
    assert check.fd[name] == pytest.approx(check.fd_autograd[name], rel=1e-6)


def test_gpt_in_float32_agrees_everywhere():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=8, n_layer=1, n_head=2, d_model=16))
    idx = torch.randint(0, 40, (2, 8))
    state = torch.random.get_rng_state()
    report = tv.Session(model, idx, idx).check_gradients()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert report.ok, report
    ops = {c.op for c in report.checks}
    assert {
        "torch.nn.functional.layer_norm",
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.functional.cross_entropy",
        "torch.nn.functional.gelu",
    } <= ops


def test_an_op_that_draws_random_numbers_is_skipped_not_failed():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1)).double().train()
    s = tv.Session(
        model,
        torch.randn(6, 4, dtype=torch.float64),
        cotangents=torch.ones(6, 1, dtype=torch.float64),
    )
    report = s.check_gradients()
    dropout = [c for c in report.checks if c.module == "1"]
    assert dropout and all(c.ok is None and "random" in c.skipped for c in dropout)
    assert report.ok
