"""Grad rules for views, shape changes and indexing, against torch.autograd.

OpInfo samples (inputs we did not choose) for every op the rules cover, plus hand-written
cases for what samples miss: repeated indices, functionalized writes through views, pieces
of a split that take no cotangent, the legacy empty input of cat.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import thunderviz as tv
from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_vjp

F64 = torch.float64


def _has_bool_index(args) -> bool:
    return any(
        isinstance(x, torch.Tensor) and x.dtype == torch.bool for x in pytree.tree_leaves(args)
    )


SHAPE_OPS = [
    "view",
    "reshape",
    "reshape_as",
    "view_as",
    "flatten",
    "unflatten",
    "permute",
    "movedim",
    "transpose",
    "t",
    "squeeze",
    ("squeeze", "multiple"),
    "unsqueeze",
    "expand",
    "expand_as",
    "flip",
    "fliplr",
    "roll",
    "repeat",
    "unfold",
    "narrow",
    "select",
    "diagonal",
    ("nn.functional.pad", "constant"),
    "tril",
    "triu",
    "cat",
    "stack",
    "hstack",
    "split",
    ("split", "list_args"),
    "split_with_sizes",
    "unbind",
    "chunk",
    "tensor_split",
    ("as_strided", ""),
]

INDEX_OPS = [
    "gather",
    "take_along_dim",
    "scatter_add",
    "index_select",
    "index_add",
    "index_fill",
    "__getitem__",
    "select_scatter",
    "slice_scatter",
    "diagonal_scatter",
]


@pytest.mark.parametrize("fn,args,kwargs", sample_params(SHAPE_OPS, limit=8))
def test_shape_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


@pytest.mark.parametrize("fn,args,kwargs", sample_params(INDEX_OPS, limit=8))
def test_indexing_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


# torch.autograd has no derivative for scatter with reduce=...; boolean-mask indices give
# data-dependent shapes that the rules' shape functions (meta tensors) cannot compute.
@pytest.mark.parametrize(
    "fn,args,kwargs", sample_params(["scatter"], limit=8, skip=lambda a, kw: "reduce" in kw)
)
def test_scatter_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


@pytest.mark.parametrize(
    "fn,args,kwargs", sample_params(["index_put"], limit=8, skip=lambda a, kw: _has_bool_index(a))
)
def test_index_put_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


# --- advanced indexing -------------------------------------------------------------------


def test_advanced_indexing_with_repeated_indices_accumulates():
    x = torch.randn(5, 4, dtype=F64)
    rows = torch.tensor([0, 3, 3, 1, 3])
    cols = torch.tensor([2, 2, 0, 2, 2])
    check_vjp(lambda x: x[rows], x)
    check_vjp(lambda x: x[rows, cols], x)  # the same element (3, 2) read three times
    check_vjp(lambda x: x[:, cols] * 2, x)
    check_vjp(lambda x: x[rows[:, None], cols[None, :2]], x)  # broadcast index tensors
    check_vjp(lambda x: x[1:, [0, 0, 1]][..., None], x)


def test_boolean_mask_indexing_and_nonzero():
    # (more mask cases: tests/autodiff/test_idioms_masks.py)
    x = torch.randn(4, 3, dtype=F64)
    mask = torch.tensor([True, False, True, True])
    check_vjp(lambda x: x[mask], x)
    check_vjp(lambda x: x.index_put((mask,), torch.zeros(3, dtype=F64), accumulate=True), x)
    check_vjp(lambda x: x[mask.nonzero(as_tuple=True)], x)


def test_index_put_values_and_self():
    x, v = torch.randn(5, 3, dtype=F64), torch.randn(4, 3, dtype=F64)
    idx = torch.tensor([4, 0, 4, 2])
    check_vjp(lambda x, v: x.index_put((idx,), v, accumulate=True), x, v)
    uniq = torch.tensor([4, 0, 2, 1])
    check_vjp(lambda x, v: x.index_put((uniq,), v), x, v)
    # values broadcast over the indexed rows: its gradient sums over them
    check_vjp(lambda x, v: x.index_put((uniq,), v[:1]), x, v)
    check_vjp(
        lambda x, s: x.index_put((uniq, torch.tensor([0, 1, 2, 0])), s),
        x,
        torch.randn((), dtype=F64),
    )


def test_setitem_is_functionalized_and_differentiated():
    def f(x, v):
        y = x * 1.0
        y[1:3] = v[:2]  # slice_scatter
        y[:, 0] = v[2, 0] * 2  # select_scatter
        y[torch.tensor([0, 4])] += v[3:5]  # index_put through __setitem__
        y.diagonal().mul_(3.0)  # diagonal_scatter
        return y

    x, v = torch.randn(5, 3, dtype=F64), torch.randn(5, 3, dtype=F64)
    ops = {
        b.sym.id
        for top in tv.trace(f, x.requires_grad_(), v.requires_grad_()).bound_symbols
        for b in top.walk()
    }
    assert {
        "aten.slice_scatter.default",
        "aten.select_scatter.default",
        "aten.diagonal_scatter.default",
    } <= ops
    check_vjp(f, x.detach(), v.detach())


def test_as_strided_overlapping_reads_sum():
    x = torch.randn(6, dtype=F64)
    check_vjp(lambda x: x.as_strided((3, 3), (1, 1)), x)  # sliding windows share elements
    check_vjp(lambda x: x.view(2, 3).as_strided((2, 2), (1, 2), 1), x)


# The third partial_views sample reads storage past the input's own elements; capture runs
# the program on a copy of the input that holds only those elements, so it cannot be traced.
@pytest.mark.parametrize(
    "fn,args,kwargs",
    sample_params(
        [("as_strided", "partial_views")], skip=lambda a, kw: kw.get("storage_offset", 0) >= 10
    ),
)
def test_as_strided_on_a_view_with_a_storage_offset_opinfo(fn, args, kwargs):
    """The offset counts from the storage, not the view (x is x_base[5:15])."""
    check_vjp(fn, *args, **kwargs)


@pytest.mark.parametrize("offset", [None, 0, 2, 7, 11])
def test_as_strided_of_a_view_taken_in_the_program(offset):
    """Offsets before, inside and past the view `x[5:15]`: positions outside it read the
    rest of x and send their gradient nowhere through the view (autograd agrees)."""
    x = torch.randn(20, dtype=F64)
    check_vjp(lambda x: x[5:15].as_strided((2, 3), (3, 1), offset) * 2, x)
    check_vjp(lambda x: x.view(4, 5)[1:, 2:].as_strided((3, 2), (2, 3), offset), x)


def test_as_strided_of_a_complex_view():
    z = torch.randn(12, dtype=torch.complex128)
    check_vjp(lambda z: z[3:9].as_strided((2, 2), (2, 1), 4) * (1 + 2j), z)


def test_as_strided_scatter_through_a_strided_write():
    """Written through a view it functionalizes to as_strided_scatter. (torch's own
    derivative of as_strided_scatter itself is wrong for `self` in torch 2.13; eager
    autograd of the view write is not.)"""

    def f(x, s):
        y = x.clone()
        y.as_strided((2, 2), (1, 3), 1).copy_(s)
        return y

    x, s = torch.randn(3, 3, dtype=F64), torch.randn(2, 2, dtype=F64)
    ops = {
        b.sym.id
        for top in tv.trace(f, x.requires_grad_(), s.requires_grad_()).bound_symbols
        for b in top.walk()
    }
    assert "aten.as_strided_scatter.default" in ops
    check_vjp(f, x.detach(), s.detach())


def test_as_strided_scatter_against_finite_differences():
    x, s = torch.randn(3, 3, dtype=F64), torch.randn(2, 2, dtype=F64)
    ct = torch.randn(3, 3, dtype=F64)
    f = lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 2), 1)  # noqa: E731
    _, (gx, gs) = tv.vjp(f)((x, s), ct)
    # the output is linear in (x, s): its VJP is exact: positions 1..4 come from s
    positions = torch.tensor([[1, 3], [2, 4]])
    expected_x = ct.clone().view(-1)
    expected_x[positions.view(-1)] = 0
    torch.testing.assert_close(gx, expected_x.view(3, 3))
    torch.testing.assert_close(gs, ct.view(-1)[positions])


# --- joining and splitting -----------------------------------------------------------------


def test_unused_split_pieces_get_zero_cotangents():
    x = torch.randn(4, 6, dtype=F64)
    check_vjp(lambda x: x.split(2, dim=1)[1] * 3, x)
    check_vjp(lambda x: x.chunk(3, dim=0)[-1], x)
    check_vjp(lambda x: x.unbind(1)[4].exp(), x)
    check_vjp(lambda x: torch.tensor_split(x, [1, 4], dim=1)[0], x)
    check_vjp(lambda x: sum(p.sum(-1) for p in x.split(4, dim=2)), torch.randn(2, 3, 12, dtype=F64))


def test_cat_skips_legacy_empty_inputs_and_negative_dims():
    a, b = torch.randn(2, 3, 2, dtype=F64), torch.randn(2, 3, 5, dtype=F64)
    check_vjp(lambda e, a, b: torch.cat([e, a, b], dim=-1), torch.zeros(0, dtype=F64), a, b)
    check_vjp(lambda a: torch.cat([a, a * 2], dim=-2), a)
    check_vjp(lambda a, b: torch.stack([a, b[..., :2]], dim=-1), a, b)


def test_squeeze_and_unsqueeze_variants():
    x = torch.randn(1, 3, 1, 2, dtype=F64)
    check_vjp(lambda x: x.squeeze(), x)
    check_vjp(lambda x: x.squeeze(2), x)
    check_vjp(lambda x: x.squeeze(1), x)  # not a size-1 dim: a no-op
    check_vjp(lambda x: x.squeeze((0, -2)), x)
    check_vjp(lambda x: x.unsqueeze(-1).unsqueeze(0), x)
    check_vjp(lambda x: x.sum().unsqueeze(0).squeeze(), x)


def test_views_of_permuted_cotangents_reshape():
    """A view's cotangent can arrive non-contiguous (from a transpose): its grad reshapes."""
    x = torch.randn(2, 3, 4, dtype=F64)
    check_vjp(lambda x: x.view(6, 4).t().contiguous().view(4, 2, 3).transpose(0, 2), x)
    check_vjp(lambda x: x.reshape(3, 8).permute(1, 0), x)
    check_vjp(lambda x: x.permute(2, 0, 1).reshape(-1), x)


def test_gather_and_scatter_with_repeated_indices():
    x, src = torch.randn(3, 5, dtype=F64), torch.randn(3, 4, dtype=F64)
    idx = torch.tensor([[0, 0, 4, 1], [2, 2, 2, 2], [4, 3, 4, 3]])
    check_vjp(lambda x: torch.gather(x, 1, idx), x)
    check_vjp(lambda x, s: torch.scatter_add(x, 1, idx, s), x, src)
    check_vjp(lambda x: torch.scatter(x, 1, idx[:, 1:2], 7.0), x)
    uniq = torch.tensor([[0, 1], [4, 2], [3, 0]])
    check_vjp(lambda x, s: torch.scatter(x, 1, uniq, s), x, src[:, :2])


def test_scatter_from_a_bigger_src_reads_only_index_shape():
    """scatter reads src[:index.shape]; the rest of src gets zero gradient. (torch.autograd
    rejects this case: its gather-shaped gradient does not fit src.)"""
    x, src, ct = (
        torch.randn(3, 5, dtype=F64),
        torch.randn(4, 4, dtype=F64),
        torch.randn(3, 5, dtype=F64),
    )
    uniq = torch.tensor([[0, 1], [4, 2], [3, 0]])
    out, (gx, gs) = tv.vjp(lambda x, s: torch.scatter(x, 1, uniq, s))((x, src), ct)
    torch.testing.assert_close(out, torch.scatter(x, 1, uniq, src))
    expected = torch.zeros_like(src)
    expected[:3, :2] = torch.gather(ct, 1, uniq)
    torch.testing.assert_close(gs, expected)
    torch.testing.assert_close(gx, ct.scatter(1, uniq, 0.0))


def test_slices_with_steps_and_negative_bounds():
    x = torch.randn(7, 5, dtype=F64)
    check_vjp(lambda x: x[1:-1:2, 1::3], x)
    check_vjp(lambda x: x[-3:, 1:100], x)
    check_vjp(lambda x: x[..., -1] + x[:, 2], x)
    check_vjp(lambda x: torch.narrow(x, 1, 1, 3).flip(0), x)


# --- what the rules save -------------------------------------------------------------------


def _saved(fn, *args):
    args = [a.requires_grad_() if a.is_floating_point() else a for a in args]
    return {s.name: s for s in tv.autodiff(tv.trace(fn, *args)).saved_for_backward}


def test_view_and_slice_rules_save_nothing():
    x = torch.randn(4, 6)
    assert _saved(lambda x: x.view(24)[3:9].permute(0).unsqueeze(1).expand(6, 3), x) == {}


def test_gather_and_index_save_only_the_indices():
    x, idx = torch.randn(4, 6), torch.tensor([[0], [3], [3], [1]])
    saved = _saved(lambda x, i: torch.gather(x, 1, i), x, idx)
    assert list(saved) == ["i"]
    saved = _saved(lambda x, i: x[i[:, 0]], x, idx)
    assert all(not s.proxy.is_float for s in saved.values())


def test_rules_call_the_op_as_recorded():
    """A rule calls its op again with the arguments it got, defaults left out as recorded:
    the augmented forward keeps the recorded call."""
    x = torch.randn(4, 6, requires_grad=True)
    tr = tv.trace(lambda x: torch.cat([x[1:3], x[:1]]), x)
    aug = tv.autodiff(tr).augmented_forward.python()
    assert "aten.slice.Tensor(x, 0, 1, 3)" in aug
    assert "aten.cat.default([" in aug


def test_overloads_that_appear_in_decompositions_called_directly():
    aten = torch.ops.aten
    x, src = torch.randn(4, 6, dtype=F64), torch.randn(4, 2, dtype=F64)
    idx = torch.tensor([5, 0, 5, 2])
    check_vjp(lambda x: aten._reshape_alias(x, [6, 4], [4, 1]), x)
    check_vjp(lambda x: aten._unsafe_view(x * 2, [24]), x)
    check_vjp(lambda x: aten.unsafe_split(x, 4, 1)[0] * 2, x)
    check_vjp(lambda x: aten.tensor_split.indices(x, [1, 5], 1)[1], x)
    check_vjp(lambda x: aten._unsafe_index(x, [None, idx]), x)
    check_vjp(lambda x, s: aten._unsafe_index_put(x, [None, idx[:2]], s, True), x, src)
    check_vjp(lambda x, s: aten._unsafe_index_put(x, [None, idx[1:3]], s), x, src)
    check_vjp(lambda x, s: torch.index_add(x, 1, idx[1:3], s, alpha=-2.5), x, src)
    check_vjp(lambda x, v: torch.index_fill(x, 1, idx, v), x, torch.tensor(1.5, dtype=F64))
