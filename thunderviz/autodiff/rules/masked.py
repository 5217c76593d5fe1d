"""Grad rules for ops that write through a boolean mask.

(Selecting through a mask, `x[mask]` and `masked_select`, is recorded by capture as
selection by `nonzero` positions, whose rules are the indexing rules: capture/masks.py.)

`masked_scatter(x, mask, source)` fills the `True` places of `x`, in order, with the first
elements of `source`. The cotangent of `x` is the output's cotangent with those places
zeroed; `source`'s is the cotangent at those places, in order, zero-padded to `source`'s
size (`masked_scatter_backward`, whose output shape is `source`'s: no data-dependent shape).
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

RULES = RuleSet("masked", supports_complex=True)  # linear maps: no conjugates


@RULES.grad(aten.masked_scatter.default)
def masked_scatter(a, mask, source):
    out = aten.masked_scatter.default(a, mask, source)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.masked_fill.Scalar(g, mask, 0))
    if requires_grad(source):
        put_grad(source, aten.masked_scatter_backward.default(g, mask, list(source.shape)))
    return out
