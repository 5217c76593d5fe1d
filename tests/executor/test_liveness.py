"""jit's compiled backward deletes each value after the statement that last reads it, on that
statement's own line: gradients stay eager's bit for bit, outputs are never deleted, and every
line still maps to the bound symbol the printed trace shows there."""

from __future__ import annotations

import copy
import re

import torch
import torch.nn as nn

import thunderviz as tv
from thunderviz.core.liveness import source_freeing_dead
from thunderviz.core.run_errors import bsym_at_line

F64 = dict(dtype=torch.float64)


def _trained(model, x):
    eager = copy.deepcopy(model)
    jitted = tv.jit(model)
    for _ in range(2):
        eager(x).square().sum().backward()
        jitted(x).square().sum().backward()
    for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)
    return jitted


def test_a_backward_that_frees_its_values_gives_eager_gradients():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 6), nn.GELU(), nn.LayerNorm(6))
    jitted = _trained(model.double(), torch.randn(4, 5, **F64))
    (backward,) = tv.last_backward_traces(jitted)
    source = source_freeing_dead(
        backward.printed_lines(print_depth=0), backward.bound_symbols, backward.output
    )
    deleted = [n for line in re.findall(r"; del ([\w, ]+)", source) for n in line.split(", ")]
    assert len(deleted) > 5
    outputs = {
        p.name for p in torch.utils._pytree.tree_leaves(backward.output) if hasattr(p, "name")
    }
    assert not outputs & set(deleted)


def test_each_line_keeps_its_bound_symbol():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()
    jitted = _trained(model, torch.randn(2, 4, **F64))
    (backward,) = tv.last_backward_traces(jitted)
    printed = backward.python(print_depth=0).splitlines()
    freeing = source_freeing_dead(
        backward.printed_lines(print_depth=0), backward.bound_symbols, backward.output
    ).splitlines()
    assert len(freeing) == len(printed)
    changed = 0
    for lineno, (mine, theirs) in enumerate(zip(freeing, printed, strict=True), 1):
        if mine == theirs:
            continue
        changed += 1
        code = theirs.split("  # ")[0]
        assert mine.startswith(code + "; del "), (mine, theirs)
        bsym = bsym_at_line(backward, lineno)
        assert bsym is not None and code.strip().lstrip("(").startswith(
            ", ".join(p.name for p in bsym.flat_proxy_outs)
        )
    assert changed > 3


def _reads_twice(x, w):
    h = x @ w
    return (h * h.sin()).sum() + h.mean()


def test_a_value_read_by_several_statements_is_kept_until_the_last():
    x = torch.randn(3, 4, **F64, requires_grad=True)
    w = torch.randn(4, 5, **F64, requires_grad=True)
    jitted = tv.jit(_reads_twice)
    got = torch.autograd.grad(jitted(x, w), (x, w))
    want = torch.autograd.grad(_reads_twice(x, w), (x, w))
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
