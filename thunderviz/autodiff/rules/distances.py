"""Grad rules for pairwise distances (`torch.cdist`, `F.pdist`), with ATen's backward kernels.

`_cdist_backward(g, x1, x2, p, out)` gives x1's gradient; x2's is the same kernel with the
roles swapped (distances are symmetric: d(x1, x2)ᵀ = d(x2, x1)).
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

RULES = RuleSet("distances")


def _mT(x):
    return aten.transpose.int(x, -2, -1)


@RULES.grad(aten._cdist_forward.default)
def cdist_forward(x1, x2, p, compute_mode):
    out = aten._cdist_forward.default(x1, x2, p, compute_mode)
    g = get_grad(out)
    if requires_grad(x1):
        put_grad(x1, aten._cdist_backward.default(aten.contiguous.default(g), x1, x2, p, out))
    if requires_grad(x2):
        put_grad(
            x2,
            aten._cdist_backward.default(
                aten.contiguous.default(_mT(g)), x2, x1, p, aten.contiguous.default(_mT(out))
            ),
        )
    return out


@RULES.grad(aten._pdist_forward.default)
def pdist_forward(x, p=2):
    out = aten._pdist_forward.default(x, p)
    put_grad(x, aten._pdist_backward.default(get_grad(out), x, p, out))
    return out
