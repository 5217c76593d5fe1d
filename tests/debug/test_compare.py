"""thunderviz.compare: two runs of one program, matched op by op; the differences it
reports are checked against eager PyTorch computed apart from thunderviz."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from thunderviz.models import GPT, GPTConfig


@pytest.fixture(scope="module")
def gpt_runs():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, d_model=32))
    idx = torch.randint(0, 64, (2, 16))
    return model, idx, tv.Session(model, idx, idx)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def test_a_run_against_itself_and_a_rerun_show_no_difference(gpt_runs):
    model, idx, a = gpt_runs
    for other in (a, tv.Session(model, idx, idx)):
        c = tv.compare(a, other)
        assert c.same and c.first_forward is None and c.first_grad is None
        assert len(c.rows) == len(a.forward.bound_symbols)
        assert all(r.forward in (None, 0.0) and r.grad in (None, 0.0) for r in c.rows)
        assert all(v in (None, 0.0) for v in c.grads.values())


def test_fp32_against_bf16_names_the_first_op_above_tolerance(gpt_runs):
    model, idx, a = gpt_runs
    low = copy.deepcopy(model).to(torch.bfloat16)
    c = tv.compare(a, tv.Session(low, idx, idx), rtol=1e-3)
    first = c.first_forward
    assert first is not None and first.forward > 1e-3
    assert all(r.forward is None or r.forward <= 1e-3 for r in c.rows[: c.rows.index(first)])
    # the reference: bf16 rounds the token embedding table; eager agrees on how much
    assert (first.op, first.module) == ("torch.nn.functional.embedding", "wte")
    expected = _relative(low.wte(idx), model.wte(idx))
    assert first.forward == pytest.approx(expected, rel=1e-6)
    assert first.source is not None and "self.wte(idx)" in first.source[2]
    assert c.first_grad is not None and c.grads["wte_weight"] > 1e-3
    assert c.measure == "values"


def test_a_swapped_activation_is_found_at_its_layer(gpt_runs):
    model, idx, a = gpt_runs
    changed = copy.deepcopy(model)
    changed.blocks[1].mlp[1] = nn.ReLU()
    c = tv.compare(a, tv.Session(changed, idx, idx))
    first = c.first_forward
    assert first.module == "blocks.1.mlp.1"
    assert "gelu" in first.note and "relu" in first.note
    # eager: what that layer outputs in each model
    seen = {}
    for name, m in (("a", model), ("b", changed)):
        m.blocks[1].mlp[1].register_forward_hook(lambda mod, i, o, n=name: seen.__setitem__(n, o))
        m(idx, idx)
    assert first.forward == pytest.approx(_relative(seen["b"], seen["a"]), rel=1e-6)
    before = c.rows[: c.rows.index(first)]
    assert all(r.forward in (None, 0.0) for r in before)  # nothing before that layer moved
    table = c.table(only_above=True).splitlines()
    assert any(
        line.startswith(first.op_a + " ") and "blocks.1.mlp.1" in line and "relu" in line
        for line in table
    )


def _program(x, w):
    return torch.tanh(x @ w).sum()


def _program_with_extra_ops(x, w):
    h = (x @ w).float()  # an inserted cast (a no-op here)
    h = h * 1.0  # an added op that changes nothing
    return torch.tanh(h).sum()


def test_inserted_casts_and_added_ops_do_not_shift_the_matching():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, generator=gen)
    w = torch.randn(4, 2, generator=gen, requires_grad=True)
    c = tv.compare(tv.Session(_program, x, w), tv.Session(_program_with_extra_ops, x, w))
    assert c.only_in_a == [] and [s.split()[1] for s in c.only_in_b] == ["torch.Tensor.mul"]
    assert [r.op for r in c.rows] == ["torch.Tensor.matmul", "torch.tanh", "torch.Tensor.sum"]
    assert c.first_forward is None and c.first_grad is None and c.grads["w"] == 0.0


def test_tvz_files_are_compared_by_their_statistics(gpt_runs, tmp_path):
    model, idx, a = gpt_runs
    low = tv.Session(copy.deepcopy(model).to(torch.bfloat16), idx, idx)
    tv.save(low, tmp_path / "unrecorded.tvz")
    with pytest.raises(ValueError, match="no statistics"):
        tv.compare(tmp_path / "unrecorded.tvz", tmp_path / "unrecorded.tvz")
    a.record_backward()
    low.record_backward()
    tv.save(a, tmp_path / "a.tvz")
    tv.save(low, tmp_path / "b.tvz")
    assert tv.compare(tmp_path / "a.tvz", tmp_path / "a.tvz").same
    c = tv.compare(tmp_path / "a.tvz", tmp_path / "b.tvz")
    assert c.measure == "norms" and not c.same
    # a norms' difference never exceeds the values' (triangle inequality)
    by_values = {r.op_a: r.forward for r in tv.compare(a, low).rows}
    assert all(
        r.forward <= by_values[r.op_a] + 1e-12
        for r in c.rows
        if r.forward is not None and by_values[r.op_a] is not None
    )
    json_rows = c.to_json()["rows"]
    assert len(json_rows) == len(c.rows)
