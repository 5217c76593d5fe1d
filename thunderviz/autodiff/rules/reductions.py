"""Grad rules for reductions, scans and value-selecting ops (max, sort, topk, ...).

The common step: a reduction's cotangent has the reduced dims removed (unless keepdim), so
it is first given them back as size-1 dims (`_unreduce`), after which it broadcasts against
the input. Ties follow torch.autograd: `amax`/`amin`/`max()`/`min()`/`median()` split the
gradient evenly among the tied elements; `max(dim)`, `sort`, `topk` and the like send it to
the one element their index output names.
"""

from __future__ import annotations

import math

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import (
    conj,
    only_where,
    scalar_zero,
    unary,
    with_arguments,
    zero_where,
)
from thunderviz.prims import aten

RULES = RuleSet("reductions")


# --- helpers: which dims a reduction removed, and putting them back ----------------------


def _dims(a, dim):
    """The dims of `a` a reduction over `dim` removes, sorted and non-negative. None, [] and
    () all mean every dim (as in ATen); a 0-dim tensor has none."""
    if a.ndim == 0:
        return []
    if dim is None:
        return list(range(a.ndim))
    if isinstance(dim, int):
        dim = [dim]
    if len(dim) == 0:
        return list(range(a.ndim))
    return sorted(d % a.ndim for d in dim)


def _unreduce(t, a, dim, keepdim):
    """`t`, a reduction of `a` over `dim`, with the reduced dims back as size 1."""
    if keepdim:
        return t
    for d in _dims(a, dim):
        t = aten.unsqueeze.default(t, d)
    return t


def _count(a, dim):
    """How many elements of `a` each output element of the reduction over `dim` covers."""
    return math.prod(a.shape[d] for d in _dims(a, dim))


def _reversed_cumsum(t, dim):
    """sum_{j >= i} t_j along `dim`: the transpose of cumsum."""
    return aten.flip.default(aten.cumsum.default(aten.flip.default(t, [dim]), dim), [dim])


# --- sum, mean -------------------------------------------------------------------------------


@RULES.grad(aten.sum.dim_IntList, supports_complex=True)
def sum_dim(a, dim, keepdim=False, **kwargs):
    out = aten.sum.dim_IntList(a, dim, keepdim, **kwargs)
    g = _unreduce(get_grad(out), a, dim, keepdim)
    put_grad(a, aten.expand.default(g, list(a.shape)))
    return out


unary(
    RULES,
    aten.sum.default,
    lambda g, a, out: aten.expand.default(g, list(a.shape)),
    supports_complex=True,
)


def _mean_grad(g, a, dim, keepdim):
    """mean = sum / count: the sum's gradient (g spread over the reduced elements) / count."""
    g = aten.expand.default(_unreduce(g, a, dim, keepdim), list(a.shape))
    return aten.div.Tensor(g, _count(a, dim))


unary(
    RULES, aten.mean.default, lambda g, a, out: _mean_grad(g, a, None, True), supports_complex=True
)


@RULES.grad(aten.mean.dim, supports_complex=True)
def mean_dim(a, dim, keepdim=False, **kwargs):
    out = aten.mean.dim(a, dim, keepdim, **kwargs)
    put_grad(a, _mean_grad(get_grad(out), a, dim, keepdim))
    return out


# --- prod ------------------------------------------------------------------------------------


def _prod_grad(g, a, dim):
    """d prod(a over dim) / da, without dividing by zero; dim None means all dims.

    The derivative at element i is the product of the other elements. With no zero in the
    slice that is prod / a_i. With exactly one zero it is 0 everywhere except at the zero,
    where it is the product of the rest. With two or more zeros it is 0 everywhere.
    `g` already has the reduced dims back as size 1 (or is 0-dim for all dims).
    """
    one = aten.scalar_tensor.default(1.0, dtype=a.dtype, device=a.device)
    is_zero = aten.eq.Scalar(a, 0)
    nonzero_a = aten.where.self(is_zero, one, a)
    if dim is None:
        zeros, rest = aten.sum.default(is_zero), aten.prod.default(nonzero_a)
    else:
        zeros = aten.sum.dim_IntList(is_zero, [dim], True)
        rest = aten.prod.dim_int(nonzero_a, dim, True)
    no_zero = aten.div.Tensor(rest, nonzero_a)
    one_zero = only_where(aten.logical_and.default(is_zero, aten.eq.Scalar(zeros, 1)), rest)
    d = aten.where.self(aten.eq.Scalar(zeros, 0), no_zero, one_zero)
    return aten.mul.Tensor(g, conj(d))  # conjugated for complex a (prod_backward)


def _in_grad_dtype(a, g):
    """`a` in the dtype of the cotangent (reductions with `dtype=` compute in that dtype)."""
    return a if a.dtype == g.dtype else aten._to_copy.default(a, dtype=g.dtype)


unary(
    RULES,
    aten.prod.default,
    lambda g, a, out: g if a.ndim == 0 else _prod_grad(g, _in_grad_dtype(a, g), None),
    supports_complex=True,
)


@RULES.grad(aten.prod.dim_int, supports_complex=True)
def prod_dim(a, dim, keepdim=False, **kwargs):
    out = aten.prod.dim_int(a, dim, keepdim, **kwargs)
    g = get_grad(out)
    if a.ndim == 0:
        put_grad(a, g)
    else:
        g = _unreduce(g, a, dim, keepdim)
        put_grad(a, _prod_grad(g, _in_grad_dtype(a, g), dim))
    return out


# --- amax, amin, max(), min(), median() --------------------------------------------------


def _amax_amin_grad(g, a, out, dim, keepdim):
    """g spread evenly over the elements equal to the extremum (ties share it)."""
    g = _unreduce(g, a, dim, keepdim)
    picked = aten.eq.Tensor(a, _unreduce(out, a, dim, keepdim))
    count = aten.sum.dim_IntList(picked, _dims(a, dim), True)
    return aten.mul.Tensor(aten.div.Tensor(g, count), picked)


@RULES.grad(aten.amax.default)
def amax(a, dim=(), keepdim=False):
    out = aten.amax.default(a, dim, keepdim)
    put_grad(a, _amax_amin_grad(get_grad(out), a, out, dim, keepdim))
    return out


@RULES.grad(aten.amin.default)
def amin(a, dim=(), keepdim=False):
    out = aten.amin.default(a, dim, keepdim)
    put_grad(a, _amax_amin_grad(get_grad(out), a, out, dim, keepdim))
    return out


def _evenly_all(g, a, out):
    # like amax over all dims, but a nan result (max/min/median propagate nan) is spread
    # over the nan elements
    picked = aten.logical_or.default(
        aten.eq.Tensor(a, out),
        aten.logical_and.default(aten.isnan.default(a), aten.isnan.default(out)),
    )
    return aten.mul.Tensor(picked, aten.div.Tensor(g, aten.sum.default(picked)))


for _op in (aten.max.default, aten.min.default, aten.median.default, aten.nanmedian.default):
    unary(RULES, _op, _evenly_all)


# --- value-selecting: max(dim), min(dim), sort, topk, kthvalue, median(dim), mode --------


def _select_back(g, indices, a, dim, keepdim):
    """The gradient of a value-selecting op: g scattered to the input places `indices`
    names along `dim` (zeros elsewhere). Each place is named at most once."""
    if a.ndim == 0:
        return g
    if not keepdim:
        g = aten.unsqueeze.default(g, dim)
        indices = aten.unsqueeze.default(indices, dim)
    zeros = aten.full.default(list(a.shape), 0.0, dtype=g.dtype, device=g.device)
    return aten.scatter.src(zeros, dim, indices, g)


def _put_selected(result, a, dim, keepdim):
    values, indices = result
    put_grad(a, _select_back(get_grad(values), indices, a, dim, keepdim))


# (values, indices) = op(a, [k,] dim, keepdim): the values at the selected index along dim
for _op in (
    aten.max.dim,
    aten.min.dim,
    aten.median.dim,
    aten.nanmedian.dim,
    aten.mode.default,
    aten.kthvalue.default,
):
    with_arguments(RULES, _op, lambda result, a, *options: _put_selected(result, a, *options[-2:]))
# sorting permutes: each input element goes to exactly one place, the indices say where
with_arguments(
    RULES,
    aten.sort.default,
    lambda result, a, dim, _descending: _put_selected(result, a, dim, True),
)
with_arguments(
    RULES,
    aten.topk.default,
    lambda result, a, _k, dim, _largest, _sorted: _put_selected(result, a, dim, True),
)


@RULES.grad(aten.sort.stable)
def sort_stable(a, **kwargs):
    values, indices = aten.sort.stable(a, **kwargs)
    dim = kwargs.get("dim", -1)
    put_grad(a, _select_back(get_grad(values), indices, a, dim, True))
    return values, indices


# --- variance and standard deviation -----------------------------------------------------


def _var_grad(g, a, dim, correction, keepdim):
    """d var(a) / da = 2 (a - mean) / (N - correction), N the count per output element
    (for complex a too: var is the mean of |a - mean|², real, and this is torch's gradient).

    `g` is the cotangent of var (reduced dims still removed unless keepdim). When
    N - correction <= 0 the variance is inf/nan; autograd's values there are kept: over all
    elements, inf where a differs from the mean and nan where it equals it; over given
    dims, 2/0 = inf times (a - mean).
    """
    c = 1 if correction is None else correction
    dims = _dims(a, dim)
    dof = _count(a, dim) - c
    g = _unreduce(g, a, dim, keepdim)
    centered = aten.sub.Tensor(a, aten.mean.dim(a, dims, True))
    if dof > 0:
        return aten.mul.Tensor(aten.mul.Tensor(g, 2.0 / dof), centered)
    if dim is None or a.ndim == 0:
        inf = aten.scalar_tensor.default(math.inf, dtype=a.dtype, device=a.device)
        nan = aten.scalar_tensor.default(math.nan, dtype=a.dtype, device=a.device)
        return aten.mul.Tensor(g, aten.where.self(aten.eq.Scalar(centered, 0), nan, inf))
    return aten.mul.Tensor(aten.mul.Tensor(g, 2.0 / dof if dof else math.inf), centered)


def _std_to_var_cotangent(g, std):
    # std = sqrt(var): d std = d var / (2 std), taken as 0 where std == 0 (autograd's choice)
    gv = aten.div.Tensor(g, aten.mul.Tensor(std, 2))
    return zero_where(aten.eq.Scalar(std, 0), gv)


@RULES.grad(aten.var.correction, supports_complex=True)
def var(a, dim=None, **kwargs):
    out = aten.var.correction(a, dim, **kwargs)
    correction, keepdim = kwargs.get("correction"), kwargs.get("keepdim", False)
    put_grad(a, _var_grad(get_grad(out), a, dim, correction, keepdim))
    return out


@RULES.grad(aten.var.dim, supports_complex=True)
def var_dim(a, dim, unbiased=True, keepdim=False):
    out = aten.var.dim(a, dim, unbiased, keepdim)
    put_grad(a, _var_grad(get_grad(out), a, dim, 1 if unbiased else 0, keepdim))
    return out


@RULES.grad(aten.std.correction, supports_complex=True)
def std(a, dim=None, **kwargs):
    out = aten.std.correction(a, dim, **kwargs)
    correction, keepdim = kwargs.get("correction"), kwargs.get("keepdim", False)
    gv = _std_to_var_cotangent(get_grad(out), out)
    put_grad(a, _var_grad(gv, a, dim, correction, keepdim))
    return out


@RULES.grad(aten.std.dim, supports_complex=True)
def std_dim(a, dim, unbiased=True, keepdim=False):
    out = aten.std.dim(a, dim, unbiased, keepdim)
    gv = _std_to_var_cotangent(get_grad(out), out)
    put_grad(a, _var_grad(gv, a, dim, 1 if unbiased else 0, keepdim))
    return out


@RULES.grad(aten.var_mean.correction, supports_complex=True)
def var_mean(a, dim=None, **kwargs):
    v, m = aten.var_mean.correction(a, dim, **kwargs)
    correction, keepdim = kwargs.get("correction"), kwargs.get("keepdim", False)
    gv, gm = get_grad(v), get_grad(m)
    put_grad(
        a,
        aten.add.Tensor(
            _var_grad(gv, a, dim, correction, keepdim), _mean_grad(gm, a, dim, keepdim)
        ),
    )
    return v, m


@RULES.grad(aten.std_mean.correction, supports_complex=True)
def std_mean(a, dim=None, **kwargs):
    s, m = aten.std_mean.correction(a, dim, **kwargs)
    correction, keepdim = kwargs.get("correction"), kwargs.get("keepdim", False)
    gs, gm = get_grad(s), get_grad(m)
    gv = _std_to_var_cotangent(gs, s)
    put_grad(
        a,
        aten.add.Tensor(
            _var_grad(gv, a, dim, correction, keepdim), _mean_grad(gm, a, dim, keepdim)
        ),
    )
    return s, m


# --- logsumexp, norms ----------------------------------------------------------------------


@RULES.grad(aten.logsumexp.default)
def logsumexp(a, dim, keepdim=False):
    # d log(sum(exp(a))) / da = exp(a) / sum(exp(a)) = exp(a - out): a softmax
    out = aten.logsumexp.default(a, dim, keepdim)
    g = _unreduce(get_grad(out), a, dim, keepdim)
    put_grad(
        a, aten.mul.Tensor(g, aten.exp.default(aten.sub.Tensor(a, _unreduce(out, a, dim, keepdim))))
    )
    return out


@RULES.grad(aten.linalg_vector_norm.default, supports_complex=True)
def vector_norm(a, ord=2, dim=None, keepdim=False, **kwargs):
    """||a||_p = (sum |a|^p)^(1/p): d/da = sgn(a) |a|^(p-1) / ||a||^(p-1). Special cases as
    in autograd: p = 0 counts nonzeros (no gradient), p = 1 is sgn(a), p = 2 is a / norm,
    p = +-inf is amax/amin of |a| (split among ties); 0 where the norm is 0. sgn (a / |a|)
    is sign for real a and makes every case right for complex a (torch's norm_backward)."""
    out = aten.linalg_vector_norm.default(a, ord, dim, keepdim, **kwargs)
    g = get_grad(out)
    if ord == 0:
        return out
    g = _unreduce(g, a, dim, keepdim)
    norm = _unreduce(out, a, dim, keepdim)
    norm_is_zero = aten.eq.Scalar(norm, 0)
    if ord == 1:
        put_grad(a, aten.mul.Tensor(aten.sgn.default(a), g))
    elif ord == 2:
        scaled = aten.div.Tensor(a, norm)
        put_grad(a, aten.mul.Tensor(g, zero_where(norm_is_zero, scaled)))
    elif math.isinf(ord):
        abs_a = aten.abs.default(a)
        picked = aten.logical_or.default(aten.eq.Tensor(abs_a, norm), aten.isnan.default(abs_a))
        spread = aten.mul.Tensor(
            aten.div.Tensor(g, aten.sum.dim_IntList(picked, _dims(a, dim), True)), picked
        )
        put_grad(a, aten.mul.Tensor(aten.sgn.default(a), spread))
    elif ord < 1:
        # |a|^(p-1) is inf at a == 0 for p < 1: those elements get 0
        pw = aten.pow.Tensor_Scalar(aten.abs.default(a), ord - 1)
        pw = zero_where(aten.eq.Scalar(a, 0), pw)
        scaled = aten.mul.Tensor(aten.sgn.default(a), pw)
        put_grad(
            a, aten.mul.Tensor(aten.mul.Tensor(scaled, g), aten.pow.Tensor_Scalar(norm, 1 - ord))
        )
    else:
        if ord < 2:
            scaled = aten.mul.Tensor(
                aten.sgn.default(a), aten.pow.Tensor_Scalar(aten.abs.default(a), ord - 1)
            )
        else:  # a |a|^(p-2): the same for p >= 2, without sign()
            scaled = aten.mul.Tensor(a, aten.pow.Tensor_Scalar(aten.abs.default(a), ord - 2))
        scale = aten.div.Tensor(g, aten.pow.Tensor_Scalar(norm, ord - 1))
        scale = zero_where(norm_is_zero, scale)
        put_grad(a, aten.mul.Tensor(scaled, scale))
    return out


# --- scans ---------------------------------------------------------------------------------


@RULES.grad(aten.cumsum.default, supports_complex=True)
def cumsum(a, dim, **kwargs):
    # out_i = sum_{j <= i} a_j, so d<g, out>/da_j = sum_{i >= j} g_i
    out = aten.cumsum.default(a, dim, **kwargs)
    g = get_grad(out)
    put_grad(a, g if a.ndim == 0 else _reversed_cumsum(g, dim))
    return out


@RULES.grad(aten.cumprod.default, supports_complex=True)
def cumprod(a, dim, **kwargs):
    """out_k = prod_{j <= k} a_j, so d<g, out>/da_i = sum_{k >= i} g_k prod_{j <= k, j != i} a_j.

    Before the first zero of a slice that is sum_{k >= i} g_k out_k / a_i (terms past the
    zero vanish with out_k). At the first zero z it is prod_{j < z} a_j times
    sum_{k >= z} g_k prod_{z < j <= k} a_j. After it, every term holds the zero: 0.
    Analytic in a: for complex tensors torch's g * conj(f'(a)) is conj of the same sums
    taken with conj(g).
    """
    out = aten.cumprod.default(a, dim, **kwargs)
    g = get_grad(out)
    if a.ndim == 0:
        put_grad(a, g)
        return out
    g = conj(g)
    x = _in_grad_dtype(a, g)
    one = aten.scalar_tensor.default(1.0, dtype=x.dtype, device=x.device)
    is_zero = aten.eq.Scalar(x, 0)
    zeros_so_far = aten.cumsum.default(is_zero, dim)
    before = aten.eq.Scalar(zeros_so_far, 0)  # no zero at or before this place
    first = aten.logical_and.default(is_zero, aten.eq.Scalar(zeros_so_far, 1))
    x_before = aten.where.self(before, x, one)
    d_before = aten.div.Tensor(_reversed_cumsum(aten.mul.Tensor(g, out), dim), x_before)
    # at the first zero: (product before it) * reversed cumsum of g times the running
    # product of what comes after it
    head = aten.prod.dim_int(x_before, dim, True)
    after = aten.cumprod.default(
        aten.where.self(aten.logical_or.default(before, first), one, x), dim
    )
    d_first = aten.mul.Tensor(head, _reversed_cumsum(aten.mul.Tensor(g, after), dim))
    zero = scalar_zero(d_first)
    put_grad(a, conj(aten.where.self(before, d_before, aten.where.self(first, d_first, zero))))
    return out


# --- no gradient ----------------------------------------------------------------------------

RULES.nondifferentiable(
    aten.argmax.default,
    aten.argmin.default,
    aten.any.default,
    aten.any.dim,
    aten.any.dims,
    aten.all.default,
    aten.all.dim,
    aten.all.dims,
    aten.count_nonzero.default,
    aten.count_nonzero.dim_IntList,
)
