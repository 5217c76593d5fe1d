"""Grad rules a user registers for their own `torch.library` ops, run through `jit`: the
generated code reaches the op's namespace, and a rule that asks the op for more than the
program did (as the CUDA attention rules ask for the log-sum-exp the program's call left
empty) gets its own value on every call, the first included. Checked against
torch.autograd on the same program written with plain torch ops."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv
from thunderviz.autodiff.api import user_rules
from thunderviz.prims import aten
from thunderviz.prims.aten import aten_symbol, op_id

F64 = dict(dtype=torch.float64)


@torch.library.custom_op("thunderviz_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


_twice.register_fake(lambda x: torch.empty_like(x))


@torch.library.custom_op("thunderviz_test::exp_with_lse", mutates_args=())
def _exp_with_lse(x: torch.Tensor, with_lse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """exp(x), and the rows' log-sum-exp if asked for (else an empty tensor, as CUDA's
    attention kernels return it when not asked)."""
    lse = torch.logsumexp(x, -1) if with_lse else x.new_empty((*x.shape[:-1], 0))
    return x.exp(), lse


@_exp_with_lse.register_fake
def _(x: torch.Tensor, with_lse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), x.new_empty((*x.shape[:-1], *(() if with_lse else (0,))))


# The same, with the log-sum-exp undefined (None) when not asked for, as cuDNN's attention
# returns it: an output the program's call does not make at all.
_LIB = torch.library.Library("thunderviz_test", "FRAGMENT")
_LIB.define("exp_maybe_lse(Tensor x, bool with_lse) -> (Tensor, Tensor)")


def _exp_maybe_lse(x: torch.Tensor, with_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    return x.exp(), (torch.logsumexp(x, -1) if with_lse else None)


def _exp_maybe_lse_meta(x: torch.Tensor, with_lse: bool):
    return torch.empty_like(x), (x.new_empty(x.shape[:-1]) if with_lse else None)


_LIB.impl("exp_maybe_lse", _exp_maybe_lse, "CompositeExplicitAutograd")
_LIB.impl("exp_maybe_lse", _exp_maybe_lse_meta, "Meta")

TWICE = torch.ops.thunderviz_test.twice.default
EXP_WITH_LSE = torch.ops.thunderviz_test.exp_with_lse.default
EXP_MAYBE_LSE = torch.ops.thunderviz_test.exp_maybe_lse.default


def _twice_rule(x):
    out = aten_symbol(TWICE)(x)
    tv.put_grad(x, aten.mul.Tensor(tv.get_grad(out), 2))
    return out


def _exp_rule_of(op):
    def exp_rule(x, with_lse):
        """The backward reads the log-sum-exp it asks the forward for: exp(x) = softmax(x)
        * exp(lse), per row."""
        out, lse = aten_symbol(op)(x, True)
        scale = aten.exp.default(aten.unsqueeze.default(lse, -1))
        softmax = aten._softmax.default(x, -1, False)
        tv.put_grad(x, aten.mul.Tensor(aten.mul.Tensor(tv.get_grad(out), softmax), scale))
        return out, lse

    return exp_rule


@pytest.fixture
def rules():
    registered = [
        (TWICE, _twice_rule),
        (EXP_WITH_LSE, _exp_rule_of(EXP_WITH_LSE)),
        (EXP_MAYBE_LSE, _exp_rule_of(EXP_MAYBE_LSE)),
    ]
    for op, rule in registered:
        tv.register_grad(op_id(op))(rule)
    yield
    for op, _ in registered:
        user_rules.rules.pop(op_id(op))


def _same_as_torch(program, reference, calls: int = 3) -> None:
    jitted = tv.jit(program)
    for call in range(calls):
        x = torch.randn(4, 3, **F64, requires_grad=True)
        got = jitted(x)
        (g,) = torch.autograd.grad(got, x)
        want = reference(x)
        (r,) = torch.autograd.grad(want, x)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=f"call {call}")
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12, msg=f"call {call}")


def test_a_users_op_and_its_rule_run_in_the_generated_code(rules):
    _same_as_torch(lambda x: TWICE(x).sin().sum(), lambda x: (x * 2).sin().sum())


def test_a_rule_asking_for_more_than_the_program_did_gets_its_own_values(rules):
    """The program's call leaves the log-sum-exp empty; the rule's asks for it. The
    augmented forward holds the rule's under a name of its own (the program's empty one is
    made by nothing), and the first call, which reuses what tracing computed, computes it."""
    jitted = tv.jit(lambda x: (EXP_WITH_LSE(x, False)[0] * 3).sum())
    x = torch.randn(4, 3, **F64, requires_grad=True)
    jitted(x)
    augmented = tv.last_traces(jitted)[1]
    (call,) = [b for b in augmented.bound_symbols if b.sym.fn is EXP_WITH_LSE]
    assert call.args[1] is True and call.output[1].shape == (4,)
    _same_as_torch(lambda x: (EXP_WITH_LSE(x, False)[0] * 3).sum(), lambda x: (x.exp() * 3).sum())


def test_a_rule_asking_for_an_output_the_programs_call_left_undefined(rules):
    """The program's call returns None for the log-sum-exp (cuDNN attention's way): the
    rule's outputs are matched to the op's by place, and the rule's extra one is its own."""
    _same_as_torch(lambda x: (EXP_MAYBE_LSE(x, False)[0] * 3).sum(), lambda x: (x.exp() * 3).sum())


def test_a_rule_replacing_an_output_the_program_reads_is_refused(rules):
    with pytest.raises(tv.AutodiffError, match="a rule must return the op's outputs"):
        tv.jit(lambda x: EXP_WITH_LSE(x, False)[0].sum() + EXP_WITH_LSE(x, False)[1].sum())(
            torch.randn(4, 3, **F64, requires_grad=True)
        )
