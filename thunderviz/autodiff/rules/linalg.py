"""Grad rules for matrix products.

`F.linear` has a torch-level rule: the augmented forward keeps the one fused call eager
makes, and the backward multiplies by the weight itself (no transposed copy of it is
saved) and produces the weight's gradient in the weight's own layout. `torch.matmul` and
`einsum` have no rules of their own: they decompose into these (`expand`/`bmm`/
`_unsafe_view` for batched matmul, `dot`/`mv` for vectors).

For out = a @ b with cotangent g: da = g @ bᴴ and db = aᴴ @ g (the conjugate transpose, as
torch's derivatives.yaml; the plain transpose for real matrices). The `add*` forms
(c*beta + alpha * a @ b) scale g by conj(beta) for c and by conj(alpha) for the product.
"""

from __future__ import annotations

import torch.nn.functional as F

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import conj, scaled
from thunderviz.prims import aten
from thunderviz.prims.torch_symbols import named_torch_symbol

RULES = RuleSet("linalg", supports_complex=True)

LINEAR = named_torch_symbol(F.linear)


def _mT(x):
    """The batched transpose of the last two dims."""
    return aten.transpose.int(x, -2, -1)


def _product_grads(a, b, g, product, transpose) -> None:
    """da = g @ bᴴ, db = aᴴ @ g, for `product` mm or bmm with its `transpose`."""
    if requires_grad(a):
        put_grad(a, product(g, conj(transpose(b))))
    if requires_grad(b):
        put_grad(b, product(conj(transpose(a)), g))


def _alpha(kwargs):
    return conj(kwargs.get("alpha", 1))


def _added_term_grad(c, g, kwargs) -> None:
    if requires_grad(c):
        put_grad(c, scaled(g, conj(kwargs.get("beta", 1))))


@RULES.grad(aten.mm.default)
def mm(a, b):
    out = aten.mm.default(a, b)
    _product_grads(a, b, get_grad(out), aten.mm.default, aten.t.default)
    return out


@RULES.grad(aten.addmm.default)
def addmm(bias, a, b, **kwargs):
    out = aten.addmm.default(bias, a, b, **kwargs)
    _added_product_grads(bias, a, b, get_grad(out), kwargs)
    return out


def _added_product_grads(c, a, b, g, kwargs) -> None:
    """The gradients of c*beta + alpha * a @ b for cotangent g (addmm's, _sparse_addmm's)."""
    _added_term_grad(c, g, kwargs)
    _product_grads(a, b, scaled(g, _alpha(kwargs)), aten.mm.default, aten.t.default)


@RULES.grad(aten._sparse_addmm.default)
def sparse_addmm(c, a, b, **kwargs):
    """`torch.sparse.mm(a, b)` with `a` sparse (a graph's adjacency) and `b` dense: as
    addmm. The sparse factor's own gradient (sparse, on its pattern) is not taken."""
    if requires_grad(a):
        raise AutodiffError(
            "thunderviz cannot differentiate torch.sparse.mm (aten._sparse_addmm) as to its "
            "sparse factor, which requires grad: its gradient is sparse, and a trace's values "
            "are dense. Make the sparse tensor a constant (`.detach()`), or multiply by its "
            "dense form."
        )
    out = aten._sparse_addmm.default(c, a, b, **kwargs)
    _added_product_grads(c, a, b, get_grad(out), kwargs)
    return out


@RULES.grad(aten.bmm.default)
def bmm(a, b):
    out = aten.bmm.default(a, b)
    _product_grads(a, b, get_grad(out), aten.bmm.default, _mT)
    return out


@RULES.grad(aten.baddbmm.default)
def baddbmm(c, a, b, **kwargs):
    out = aten.baddbmm.default(c, a, b, **kwargs)
    g = get_grad(out)
    _added_term_grad(c, g, kwargs)
    _product_grads(a, b, scaled(g, _alpha(kwargs)), aten.bmm.default, _mT)
    return out


@RULES.grad(aten.addbmm.default)
def addbmm(c, a, b, **kwargs):
    """c + sum_i a[i] @ b[i]: every batch shares the output's cotangent."""
    out = aten.addbmm.default(c, a, b, **kwargs)
    g = get_grad(out)
    assert g is not None  # out is a tensor
    _added_term_grad(c, g, kwargs)
    ga = aten.expand.default(
        aten.unsqueeze.default(scaled(g, _alpha(kwargs)), 0), [a.shape[0], *g.shape]
    )
    _product_grads(a, b, ga, aten.bmm.default, _mT)
    return out


@RULES.grad(aten.dot.default)
def dot(a, b):
    out = aten.dot.default(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.mul.Tensor(conj(b), g))
    if requires_grad(b):
        put_grad(b, aten.mul.Tensor(conj(a), g))
    return out


@RULES.grad(aten.vdot.default)
def vdot(a, b):
    """sum(conj(a) * b): antiholomorphic in a, so a takes conj(g) * b; b takes g * a."""
    out = aten.vdot.default(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.mul.Tensor(conj(g), b))
    if requires_grad(b):
        put_grad(b, aten.mul.Tensor(g, a))
    return out


def _outer(u, v):
    return aten.mul.Tensor(aten.unsqueeze.default(u, 1), aten.unsqueeze.default(v, 0))


def _matrix_vector_grads(m, v, g) -> None:
    """out = m @ v: dm = g ⊗ conj(v), dv = mᴴ @ g."""
    if requires_grad(m):
        put_grad(m, _outer(g, conj(v)))
    if requires_grad(v):
        put_grad(v, aten.mv.default(conj(aten.t.default(m)), g))


@RULES.grad(aten.mv.default)
def mv(m, v):
    out = aten.mv.default(m, v)
    _matrix_vector_grads(m, v, get_grad(out))
    return out


@RULES.grad(aten.addmv.default)
def addmv(c, m, v, **kwargs):
    out = aten.addmv.default(c, m, v, **kwargs)
    g = get_grad(out)
    _added_term_grad(c, g, kwargs)
    _matrix_vector_grads(m, v, scaled(g, _alpha(kwargs)))
    return out


@RULES.grad(aten.addr.default)
def addr(c, u, v, **kwargs):
    """c*beta + alpha * outer(u, v), as derivatives.yaml takes it (torch's decomposition
    leaves `c` out when beta is 0, where eager's gradient of `c` is g*0, not none); each
    product is scaled after it is taken, as eager's are."""
    out = aten.addr.default(c, u, v, **kwargs)
    g = get_grad(out)
    _added_term_grad(c, g, kwargs)
    if requires_grad(u):
        put_grad(u, scaled(aten.mv.default(g, conj(v)), _alpha(kwargs)))
    if requires_grad(v):
        put_grad(v, scaled(aten.mv.default(aten.t.default(g), conj(u)), _alpha(kwargs)))
    return out


def _linear_args(input, weight, bias=None):
    return input, weight, bias


@RULES.grad(F.linear)
def linear(*args, **kwargs):
    """out = x Wᵀ + b over the last dim of x: dx = g W, dW = gᵀ x, db = sum of g, with the
    leading dims of x and g flattened into one (a 1-D weight is a dot product per row)."""
    x, weight, bias = _linear_args(*args, **kwargs)
    out = LINEAR(*args, **kwargs)
    g = get_grad(out)
    if weight.ndim == 1:
        g_col = aten.unsqueeze.default(g, -1)
        if requires_grad(x):
            put_grad(x, aten.mul.Tensor(g_col, conj(weight)))
        if requires_grad(weight):
            put_grad(weight, aten.mul.Tensor(g_col, conj(x)))  # put_grad sums the leading dims
        if requires_grad(bias):
            put_grad(bias, g)
        return out
    g2 = aten.reshape.default(g, [-1, weight.shape[0]])
    if requires_grad(x):
        put_grad(x, aten.reshape.default(aten.mm.default(g2, conj(weight)), list(x.shape)))
    if requires_grad(weight):
        x2 = aten.reshape.default(x, [-1, weight.shape[1]])
        put_grad(weight, aten.mm.default(aten.t.default(g2), conj(x2)))
    if requires_grad(bias):
        put_grad(bias, aten.sum.dim_IntList(g2, [0]))
    return out
