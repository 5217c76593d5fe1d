"""Bad input gets a clear error: what was wrong, the op, the user's line, what to do."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import thunderviz as tv


def test_not_callable_is_a_type_error():
    with pytest.raises(TypeError, match="function or an nn.Module"):
        tv.trace(42, torch.randn(2))


def test_fake_must_be_a_bool():
    with pytest.raises(TypeError, match="fake must be True or False"):
        tv.trace(lambda x: x, torch.randn(2), fake="yes")


def test_inputs_that_do_not_match_the_signature():
    def f(x, y):
        return x + y

    with pytest.raises(TypeError, match=r"inputs don't match .*f\(x, y\)"):
        tv.trace(f, torch.randn(2))


class Bad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)

    def forward(self, x):
        return self.proj(x)


def test_an_op_that_fails_names_op_line_and_module():
    with pytest.raises(tv.CaptureError) as info:
        tv.trace(Bad(), torch.randn(2, 5))  # 5 features into a Linear(4, 3)
    err = info.value
    assert err.op == "torch.nn.functional.linear"
    assert err.module_path == "proj"
    assert "test_errors.py" in str(err) and "self.proj(x)" in str(err)
    assert "mat1 and mat2 shapes cannot be multiplied" in str(err)


def test_differentiating_an_op_without_a_rule_names_it():
    def f(x):
        return torch.special.zeta(x, torch.full_like(x, 2.0))

    tr = tv.trace(f, torch.rand(3, requires_grad=True) + 1)
    with pytest.raises(tv.AutodiffError) as info:
        tv.autodiff(tr)
    msg = str(info.value)
    assert "zeta" in msg and "test_errors.py" in msg and "register_grad" in msg


def _branches_on_a_value(x):
    return x * 2 if x.sum() > 0 else x


def _selects_by_a_mask(x):
    return x[x > 0].sum()


def _reads_an_item(x):
    return x * x.max().item()


@pytest.mark.parametrize("fn", [_branches_on_a_value, _selects_by_a_mask, _reads_an_item])
def test_a_value_fake_tensors_do_not_have(fn):
    with pytest.raises(tv.CaptureError, match="needs the value of a tensor.*fake=False"):
        tv.trace(fn, torch.randn(4), fake=True)
    tv.trace(fn, torch.randn(4))  # real tensors have it
