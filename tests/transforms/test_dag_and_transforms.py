"""DAG utilities and transforms on real traces, checked by running them against eager."""

from __future__ import annotations

import random

import torch

import thunderviz as tv
from thunderviz.core.dag import (
    TOPOSORT_ORDER,
    bsym_list_to_dag,
    consumers,
    is_valid_order,
    producers,
    toposort_bsym_dag,
)
from thunderviz.models import GPT, MLP, GPTConfig
from thunderviz.prims import aten
from thunderviz.transforms import (
    CSE,
    DCE,
    VISIT_TYPE,
    VisitorTransform,
    cse,
    dce,
    insert_inplace,
    record_transform,
    replace_inplace,
    visitor_transform,
)


def gpt_trace():
    torch.manual_seed(0)
    g = GPT(GPTConfig(n_layer=2, d_model=32, n_head=2, vocab_size=50, block_size=16))
    idx = torch.randint(0, 50, (2, 8))
    return g, idx, tv.trace(g, idx, idx)


def run(tr, g, idx):
    return tr.python_callable()(idx, idx, *g.parameters(), *g.buffers())


def test_producers_and_consumers_agree_with_the_bound_symbols():
    _, _, tr = gpt_trace()
    made = producers(tr.bound_symbols)
    read = consumers(tr.bound_symbols)
    for b in tr.bound_symbols:
        for p in b.flat_proxy_outs:
            assert made[p.name] is b
        for p in b.flat_proxy_args:
            assert b in read[p.name]
    roots, leaves = bsym_list_to_dag(tr.bound_symbols)
    assert roots and leaves
    assert all(not n.parents for n in roots)


def test_toposort_with_a_random_selector_is_valid_and_computes_the_same():
    g, idx, tr = gpt_trace()
    rng = random.Random(0)
    order = toposort_bsym_dag(tr.bound_symbols, selector=lambda ready: rng.choice(ready))
    assert order != tr.bound_symbols  # the selector really reordered
    assert sorted(map(id, order)) == sorted(map(id, tr.bound_symbols))
    assert is_valid_order(order, tr.flat_args)
    shuffled = tr.from_trace(bound_symbols=order)
    assert torch.equal(run(shuffled, g, idx), run(tr, g, idx))


def test_bottom_up_puts_every_consumer_before_its_producer():
    _, _, tr = gpt_trace()
    order = toposort_bsym_dag(tr.bound_symbols, TOPOSORT_ORDER.BOTTOM_UP)
    pos = {id(b): i for i, b in enumerate(order)}
    made = producers(tr.bound_symbols)
    for b in tr.bound_symbols:
        for p in b.flat_proxy_args:
            if p.name in made:
                assert pos[id(b)] < pos[id(made[p.name])]


def test_visitor_replacing_tanh_by_its_exp_definition_gives_the_same_numbers():
    torch.manual_seed(0)
    m = MLP().double()
    x = torch.randn(5, 8, dtype=torch.float64)
    tr = tv.trace(m, x)

    def tanh_as_exp(bsym):
        if bsym.sym.id != "torch.tanh":
            return VISIT_TYPE.NO_OP
        (a,) = bsym.args
        e2 = aten.exp.default(aten.mul.Tensor(a, 2.0))
        out = aten.div.Tensor(aten.sub.Tensor(e2, 1.0), aten.add.Tensor(e2, 1.0))
        return VISIT_TYPE.REPLACE, out

    new = visitor_transform(tr, tanh_as_exp, name="tanh as exp")
    assert not any(b.sym.id == "torch.tanh" for b in new.bound_symbols)
    assert any(b.sym.id == "aten.exp.default" for b in new.bound_symbols)
    assert "Constructed by tanh as exp" in str(new)
    ref = m(x)
    torch.testing.assert_close(
        new.python_callable()(x, *m.parameters()), ref, rtol=1e-12, atol=1e-12
    )


def test_insert_after_and_before_keep_the_original():
    m = MLP()
    x = torch.randn(2, 8)
    tr = tv.trace(m, x)

    def double_after_linear(bsym):
        if bsym.sym.id == "torch.nn.functional.linear":
            aten.mul.Tensor(bsym.output, 2.0)
            return VISIT_TYPE.INSERT_AFTER
        return VISIT_TYPE.NO_OP

    new = visitor_transform(tr, double_after_linear)
    assert len(new.bound_symbols) == len(tr.bound_symbols) + 3
    assert torch.equal(
        new.python_callable()(x, *m.parameters()), m(x)
    )  # unused extras change nothing
    assert len(dce(new).bound_symbols) == len(tr.bound_symbols)


def test_dce_removes_what_is_unused_and_nothing_else():
    def f(x):
        unused = x.sin() * 3  # noqa: F841 - two dead ops, on purpose
        kept = x.exp()
        return kept + 1

    tr = tv.trace(f, torch.randn(4))
    out = dce(tr)
    removed = [b.sym.id for b in tr.bound_symbols if b not in out.bound_symbols]
    assert removed == ["torch.Tensor.sin", "torch.Tensor.mul"]
    assert [b.sym.id for b in out.bound_symbols] == ["torch.Tensor.exp", "torch.Tensor.add"]
    x = torch.randn(4)
    assert torch.equal(out.python_callable()(x), f(x))
    assert "Constructed by DCE" in out.python()


def test_dce_keeps_write_backs_into_inputs():
    def f(x):
        x.mul_(2)
        return x.sum()

    tr = tv.trace(f, torch.ones(3))
    assert len(dce(tr).bound_symbols) == len(tr.bound_symbols)


def test_cse_merges_repeated_computation_but_not_random_draws():
    def f(x):
        a = x.exp() + x.exp()
        noise = torch.rand_like(x) + torch.rand_like(x)
        return a, noise

    tr = tv.trace(f, torch.randn(3))
    out = cse(tr)
    exps = [b for b in out.bound_symbols if b.sym.id == "torch.Tensor.exp"]
    rands = [b for b in out.bound_symbols if "rand" in b.sym.id]
    assert len(exps) == 1 and len(rands) == 2
    x = torch.randn(3)
    torch.testing.assert_close(out.python_callable()(x)[0], f(x)[0])


def test_insert_and_replace_in_place():
    m = MLP()
    x = torch.randn(2, 8)
    tr = tv.trace(m, x)
    first = tr.bound_symbols[0]
    n = len(tr.bound_symbols)
    insert_inplace(tr, 1, lambda t: aten.neg.default(t), first.output)
    assert len(tr.bound_symbols) == n + 1 and tr.bound_symbols[1].sym.id == "aten.neg.default"
    relu_at = next(
        i for i, b in enumerate(tr.bound_symbols) if b.sym.id == "torch.nn.functional.relu"
    )
    replace_inplace(tr, relu_at, lambda a, inplace=False: aten.relu.default(a))
    assert tr.bound_symbols[relu_at].sym.id == "aten.relu.default"
    assert torch.equal(tr.python_callable()(x, *m.parameters()), m(x))


def test_recorded_transforms_have_a_step_per_visit():
    def f(x):
        dead = x.cos()  # noqa: F841 - dead on purpose
        return x.exp() + x.exp()

    tr = tv.trace(f, torch.randn(3))
    run_cse = record_transform(CSE(), tr)
    assert [s.visit_type for s in run_cse.steps] == [
        VISIT_TYPE.NO_OP,
        VISIT_TYPE.NO_OP,
        VISIT_TYPE.REPLACE,
        VISIT_TYPE.NO_OP,
    ]
    run_dce = record_transform(DCE(), run_cse.after)
    removed = [s for s in run_dce.steps if s.visit_type is VISIT_TYPE.REMOVE]
    assert [s.visited.sym.id for s in removed] == ["torch.Tensor.cos"]
    # replaying: the trace at the last step is the transform's result
    assert [b.sym.id for b in run_dce.trace_at(len(run_dce.steps) - 1).bound_symbols] == [
        b.sym.id for b in run_dce.after.bound_symbols
    ]
    custom = record_transform(VisitorTransform(lambda b: VISIT_TYPE.NO_OP, "noop"), tr)
    assert len(custom.steps) == len(tr.bound_symbols)
