"""Grad rules for `as_strided` and `as_strided_scatter`: views defined on the storage.

`as_strided(a, size, stride, offset)` reads `a`'s *storage*, with `offset` counted from the
storage's start, not from `a`'s first element: on a view with a storage offset (`x[5:]`)
it may read elements before or after `a`, and its gradient reaches only the ones that are
elements of `a`. A trace does not know strides, so the rule finds out at run time which
element of `a` each position reads: it numbers `a`'s elements in a copy that keeps `a`'s
layout in its storage (`slice_scatter` clones the whole storage and keeps the strides and
offset) and reads that copy with the same size, stride and offset.
"""

from __future__ import annotations

import torch

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten
from thunderviz.prims.call_args import op_args

RULES = RuleSet("strided")

# an integer dtype of each item size, to number elements in a view of `a`'s own storage
_INT_OF_SIZE = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}


def _numbered(a_int, first):
    """A tensor with `a_int`'s layout in a copy of its storage whose elements of `a` hold
    first, first ± 1, ... (row-major); storage outside `a` keeps its bytes."""
    step = 1 if first >= 0 else -1
    numbers = aten.arange.start_step(
        first, first + step * a_int.numel, step, dtype=a_int.dtype, device=a_int.device
    )
    lead = aten.unsqueeze.default(a_int, 0)  # slice_scatter wants a dim, a 0-dim `a` has none
    src = aten.view.default(numbers, [1, *a_int.shape])
    return aten.slice_scatter.default(lead, src, 0, 0, 1)


def read_positions(a, size, stride, storage_offset):
    """Int64 tensor of `size`: the flat index of the element of `a` each position of
    `as_strided(a, size, stride, storage_offset)` reads, or `a.numel` where it reads storage
    outside `a`. Computed where `a` is the real tensor (the forward)."""
    complex_ = a.dtype.is_complex
    units = aten.view_as_real.default(a) if complex_ else a  # a complex element is two reals
    a_int = aten.view.dtype(units, _INT_OF_SIZE[units.dtype.itemsize])
    if a_int.numel > torch.iinfo(a_int.dtype).max:
        raise AutodiffError(
            f"as_strided of a {a.dtype} tensor of {a.numel} elements: its gradient numbers the "
            f"elements in {a_int.dtype}, which holds up to {torch.iinfo(a_int.dtype).max}. "
            "Call as_strided on a float32 copy (`x.float().as_strided(...)`)."
        )
    k = 2 if complex_ else 1
    size, stride = list(size), [k * s for s in stride]
    # None: from `a`'s own storage offset, which the numbered copies keep
    offset = None if storage_offset is None else k * storage_offset
    # number a's elements twice, differently: a position inside `a` reads two different
    # numbers, one outside reads the same storage bytes twice
    up = aten.as_strided.default(_numbered(a_int, 0), size, stride, offset)
    down = aten.as_strided.default(_numbered(a_int, -1), size, stride, offset)
    inside = aten.ne.Tensor(up, down)
    index = aten.floor_divide.default(aten._to_copy.default(up, dtype=torch.int64), k)
    return aten.where.self(
        inside, index, aten.scalar_tensor.default(a.numel, dtype=torch.int64, device=a.device)
    )


@RULES.grad(aten.as_strided.default, supports_complex=True)  # numbers complex elements as pairs
def as_strided(*args, **kwargs):
    """Each position's cotangent goes to the element of `a` it reads (summed where several
    read one element); positions outside `a` send nothing to `a`."""
    out = aten.as_strided.default(*args, **kwargs)
    a, size, stride, storage_offset = op_args(aten.as_strided.default, args, kwargs)
    positions = read_positions(a, size, stride, storage_offset)
    g = get_grad(out)
    flat = aten.index_put.default(aten.new_zeros.default(g, [a.numel + 1]), [positions], g, True)
    put_grad(a, aten.view.default(aten.slice.Tensor(flat, 0, 0, a.numel), list(a.shape)))
    return out


@RULES.grad(aten.as_strided_scatter.default, supports_complex=True)
def as_strided_scatter(*args, **kwargs):
    """The output is `a` (in `a`'s layout) with the positions `src` writes replaced: `a`'s
    elements written over take no gradient, `src` takes the cotangent of the elements it
    lands on (none where it writes storage outside `a`)."""
    out = aten.as_strided_scatter.default(*args, **kwargs)
    a, src, size, stride, storage_offset = op_args(aten.as_strided_scatter.default, args, kwargs)
    positions = read_positions(a, size, stride, storage_offset)
    g = get_grad(out)
    flat = aten.cat.default(
        [aten.reshape.default(g, [a.numel]), aten.new_zeros.default(g, [1])]
    )  # the slot for "outside a"
    if requires_grad(a):
        kept = aten.index_put.default(flat, [positions], aten.new_zeros.default(g, []), False)
        put_grad(a, aten.view.default(aten.slice.Tensor(kept, 0, 0, a.numel), list(a.shape)))
    if requires_grad(src):
        put_grad(src, aten.index.Tensor(flat, [positions]))
    return out
