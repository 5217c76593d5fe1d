"""prims.call_args.op_args, which rules read their arguments with, against torch.fx's own
normalization of a call to its schema (defaults applied)."""

from __future__ import annotations

import pytest
import torch
from torch.fx.operator_schemas import normalize_function

from thunderviz.prims import aten as tv_aten
from thunderviz.prims.call_args import op_args

aten = torch.ops.aten
x = torch.randn(2, 3, 4, 4)

CALLS = [
    (aten.sum.dim_IntList, (x, [1]), {}),
    (aten.sum.dim_IntList, (x, [1], True), {"dtype": torch.float64}),
    (aten.leaky_relu.default, (x,), {}),
    (aten.avg_pool2d.default, (x, [2]), {"stride": [1]}),
    (aten.max_pool2d_with_indices.default, (x, [2, 2], [1, 1]), {}),
    (aten.sort.stable, (x,), {"stable": True, "descending": True}),
    (aten.index_put.default, (x, [None, torch.tensor([0, 2])], x[:, :2]), {}),
    (aten._to_copy.default, (x,), {"dtype": torch.float64}),
    (aten.embedding.default, (x[0, 0], torch.tensor([1, 0])), {"padding_idx": 1}),
    (aten.bernoulli_.float, (x.clone(),), {}),
]


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b, strict=True))
    return a is b or (not isinstance(a, torch.Tensor) and a == b)


# ids name the overload and the call's position (the arguments hold random tensors, whose
# printed values would make the ids change from one collection to the next)
@pytest.mark.parametrize(
    "op,args,kwargs", CALLS, ids=[f"{i}-{op}" for i, (op, _, _) in enumerate(CALLS)]
)
def test_every_argument_in_schema_order_with_defaults(op, args, kwargs):
    reference = normalize_function(op, args, kwargs, normalize_to_only_use_kwargs=True)
    assert reference is not None
    expected = tuple(reference.kwargs.values())
    assert _same(op_args(op, args, kwargs), expected)


def test_a_symbol_reads_as_its_overload():
    call = ((x, [1]), {"keepdim": True})
    assert _same(op_args(tv_aten.sum.dim_IntList, *call), op_args(aten.sum.dim_IntList, *call))


def test_leading_spells_out_positional_defaults_up_to_a_keyword_or_a_required_argument():
    t = x.clone()
    # bernoulli_.float(self, p=0.5, *, generator=None): the functional twin takes p
    assert _same(op_args(aten.bernoulli_.float, (t,), {}, leading=True), (t, 0.5))
    # sum.dim_IntList(self, dim, keepdim=False, *, dtype=None): dtype is keyword-only
    assert _same(op_args(aten.sum.dim_IntList, (x, [1]), {}, leading=True), (x, [1], False))
    # stops at the first argument the call passes by keyword
    assert _same(
        op_args(aten.avg_pool2d.default, (x, [2]), {"padding": [1]}, leading=True), (x, [2], [])
    )


def test_a_missing_required_argument_is_named():
    with pytest.raises(TypeError, match="aten.sum.dim_IntList: missing argument 'dim'"):
        op_args(aten.sum.dim_IntList, (x,), {})
