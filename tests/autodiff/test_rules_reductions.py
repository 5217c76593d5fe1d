"""Grad rules for reductions, scans and value-selecting ops, checked against torch.autograd.

Beyond the OpInfo samples: ties (autograd splits evenly for amax/amin/max()/min()/median()
and follows the index for max(dim)/sort/topk), zeros in prod/cumprod, keepdim both ways,
negative and empty dims, 0-dim inputs, corrections that leave no degrees of freedom,
norms at zero, and `dtype=` reductions of float32 inputs.
"""

from __future__ import annotations

import math

import pytest
import torch

import thunderviz as tv
from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_each_output, check_vjp
from thunderviz.autodiff import BUILTIN_RULES
from thunderviz.autodiff.registry import symbol_id

F64 = torch.float64
INF = math.inf
aten = torch.ops.aten

pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom")


def _t(rows):
    return torch.tensor(rows, dtype=F64)


def _randn(*shape, seed=0, dtype=F64):
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


# --- OpInfo ---------------------------------------------------------------------------------------

REDUCTION_OPINFO = [
    "sum",
    "mean",
    "prod",
    "amax",
    "amin",
    "var",
    ("var", "unbiased"),
    "std",
    ("std", "unbiased"),
    "var_mean",
    ("var_mean", "unbiased"),
    "std_mean",
    ("std_mean", "unbiased"),
    "logsumexp",
    "cumsum",
    "cumprod",
    ("max", "reduction_with_dim"),
    ("max", "reduction_no_dim"),
    ("min", "reduction_with_dim"),
    ("min", "reduction_no_dim"),
    "sort",
    "msort",
    "topk",
    "kthvalue",
    "median",
    "mode",
    "linalg.vector_norm",
    "norm",
    ("norm", "fro"),
    ("norm", "inf"),
    "nansum",
    "nanmean",
    "argmax",
    "argmin",
    "any",
    "all",
]


@pytest.mark.parametrize("fn,args,kwargs", sample_params(REDUCTION_OPINFO, limit=10, spread=True))
def test_reduction_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


# --- keepdim, negative dims, empty dim lists, 0-dim -----------------------------------------------

REDUCE = [
    ("sum", lambda x, d, k: x.sum(d, keepdim=k)),
    ("mean", lambda x, d, k: x.mean(d, keepdim=k)),
    ("prod", lambda x, d, k: x.prod(d[0], keepdim=k)),
    ("amax", lambda x, d, k: x.amax(d, keepdim=k)),
    ("amin", lambda x, d, k: x.amin(d, keepdim=k)),
    ("max_dim", lambda x, d, k: x.max(d[0], keepdim=k).values),
    ("min_dim", lambda x, d, k: x.min(d[0], keepdim=k).values),
    ("median_dim", lambda x, d, k: x.median(d[0], keepdim=k).values),
    ("kthvalue", lambda x, d, k: x.kthvalue(2, d[0], keepdim=k).values),
    ("mode", lambda x, d, k: x.mode(d[0], keepdim=k).values),
    ("var", lambda x, d, k: x.var(d, keepdim=k)),
    ("var_c0", lambda x, d, k: x.var(d, correction=0, keepdim=k)),
    ("std", lambda x, d, k: x.std(d, keepdim=k)),
    ("var_mean", lambda x, d, k: torch.var_mean(x, d, keepdim=k)),
    ("std_mean", lambda x, d, k: torch.std_mean(x, d, correction=2, keepdim=k)),
    ("logsumexp", lambda x, d, k: x.logsumexp(d, keepdim=k)),
    ("norm2", lambda x, d, k: torch.linalg.vector_norm(x, 2, d, k)),
    ("norm1", lambda x, d, k: torch.linalg.vector_norm(x, 1, d, k)),
    ("norm3", lambda x, d, k: torch.linalg.vector_norm(x, 3, d, k)),
    ("norm_half", lambda x, d, k: torch.linalg.vector_norm(x, 0.5, d, k)),
    ("norm_1.5", lambda x, d, k: torch.linalg.vector_norm(x, 1.5, d, k)),
    ("norm_inf", lambda x, d, k: torch.linalg.vector_norm(x, INF, d, k)),
    ("norm_-inf", lambda x, d, k: torch.linalg.vector_norm(x, -INF, d, k)),
]
DIMS = [([1], False), ([1], True), ([-1], False), ([-3], True), ([0, 2], False), ([-1, 0], True)]
SINGLE_DIM = {"prod", "max_dim", "min_dim", "median_dim", "kthvalue", "mode"}
REDUCE_DIMS = [
    pytest.param(fn, dim, keepdim, id=f"{name}-{dim}-{'keep' if keepdim else 'drop'}")
    for name, fn in REDUCE
    for dim, keepdim in DIMS
    if len(dim) == 1 or name not in SINGLE_DIM
]


@pytest.mark.parametrize("fn,dim,keepdim", REDUCE_DIMS)
def test_reduce_dims(fn, dim, keepdim):
    check_vjp(lambda x: fn(x, dim, keepdim), _randn(2, 3, 4))


def test_empty_dim_list_reduces_everything():
    check_each_output(
        lambda x: [
            x.sum([]),
            x.mean([]),
            x.amax([]),
            x.amin(()),
            torch.linalg.vector_norm(x, dim=[]),
            x.sum(None),
            x.mean(None),
        ],
        _randn(3, 4),
    )


def test_zero_dim_inputs():
    x = torch.tensor(0.7, dtype=F64)
    check_each_output(
        lambda a: [
            a.sum(),
            a.sum(0),
            a.mean(),
            a.mean(0),
            a.prod(),
            a.prod(0),
            a.amax(),
            a.amax(0),
            a.amin(-1),
            a.max(),
            a.min(),
            a.max(0).values,
            a.min(0, keepdim=True).values,
            a.sort().values,
            a.topk(1).values,
            a.cumsum(0),
            a.cumprod(0),
            a.logsumexp(0),
            torch.linalg.vector_norm(a),
            a.norm(p=3),
            a.kthvalue(1).values,
            a.median(),
            a.median(0).values,
        ],
        x,
    )
    check_each_output(
        lambda a: [
            a.var(),
            a.std(),
            a.var(correction=0),
            a.var(0),
            torch.var_mean(a, correction=0),
        ],
        x,
    )


def test_float32_inputs_with_dtype_float64():
    # the reduction runs in float64; the gradient comes back in float32
    x = _randn(3, 4).float() + 2
    check_vjp(
        lambda x: [
            x.sum(1, dtype=F64),
            x.sum(dtype=F64),
            x.mean(0, dtype=F64),
            x.mean(dtype=F64),
            x.prod(1, dtype=F64),
            x.prod(dtype=F64),
            x.cumsum(0, dtype=F64),
            x.cumprod(1, dtype=F64),
            torch.linalg.vector_norm(x, 3, dtype=F64),
        ],
        x,
        rtol=1e-6,
        atol=1e-6,
    )


# --- ties -----------------------------------------------------------------------------------------

TIES = _t([[1.0, 3.0, 3.0, -3.0], [2.0, 2.0, 2.0, 2.0], [0.0, -1.0, 0.0, 1.0]])


def test_ties_follow_autograd():
    check_each_output(
        lambda a: [
            a.amax(1),
            a.amin(0),
            a.amax(),
            a.max(),
            a.min(),
            a.median(),
            a.max(1).values,
            a.min(0, keepdim=True).values,
            a.median(1).values,
            a.sort(1).values,
            a.sort(dim=0, descending=True, stable=True).values,
            a.topk(2, dim=1).values,
            torch.linalg.vector_norm(a, INF, dim=1),
            torch.linalg.vector_norm(a, -INF),
            a.kthvalue(2, 1).values,
            a.mode(1).values,
        ],
        TIES,
    )


def test_amax_splits_ties_evenly_and_max_dim_picks_one():
    ct = torch.ones(3, dtype=F64)
    _, (g,) = tv.vjp(lambda a: a.amax(1))((TIES,), [ct])
    torch.testing.assert_close(g, _t([[0, 0.5, 0.5, 0], [0.25] * 4, [0, 0, 0, 1.0]]))
    (values, indices), (g,) = tv.vjp(lambda a: a.max(1))((TIES,), [ct, torch.zeros(())])
    assert g.sum(1).tolist() == [1.0, 1.0, 1.0] and (g != 0).sum() == 3
    assert torch.equal(g.argmax(1), indices)


def test_max_of_nan_goes_to_the_nans():
    x = _t([1.0, math.nan, 3.0, math.nan])
    check_each_output(lambda a: [a.max(), a.min(), a.median()], x)


# --- prod and cumprod with zeros ------------------------------------------------------------------


@pytest.mark.parametrize(
    "x",
    [
        _t([[0.5, 2.0, 3.0], [1.5, 0.0, 2.0]]),  # one zero in all
        _t([[0.5, 2.0, 0.0], [1.5, 0.0, 2.0]]),  # two zeros
        _t([[0.0, 2.0, 3.0], [0.0, 0.0, 2.0], [1.0, 2.0, 3.0], [4.0, 0.0, 5.0]]),  # per-row mix
    ],
    ids=["one_zero", "two_zeros", "mixed"],
)
def test_prod_with_zeros(x):
    check_each_output(lambda a: [a.prod(), a.prod(1), a.prod(0, keepdim=True), a.prod(-1)], x)


def test_prod_zero_gradient_is_the_product_of_the_others():
    x = _t([[0.5, 2.0, 3.0], [1.5, 0.0, 2.0]])
    _, (g,) = tv.vjp(torch.prod)((x,), [torch.tensor(1.0, dtype=F64)])
    torch.testing.assert_close(g, _t([[0.0, 0.0, 0.0], [0.0, 9.0, 0.0]]))


def test_cumprod_with_zeros():
    x = _t([[0.0, 2.0, 3.0, 2.0], [1.0, 0.0, 2.0, 0.0], [1.0, 2.0, 3.0, 0.5], [4.0, 0.0, 5.0, 0.0]])
    check_each_output(lambda a: [a.cumprod(1), a.cumprod(0), a.cumprod(-1)], x)


# --- variance: corrections and degenerate cases ---------------------------------------------------


def test_var_std_corrections():
    x = _randn(3, 4)
    check_each_output(
        lambda a: [
            a.var(1, correction=0),
            a.var(correction=2),
            a.std(0, correction=2),
            torch.var(a, 1, unbiased=False),
            torch.std(a, unbiased=False),
            torch.var_mean(a, 1, correction=0, keepdim=True),
            torch.std_mean(a, -1),
            aten.var.dim(a, [1], False),
            aten.std.dim(a, [0], True, True),
        ],
        x,
    )


def test_var_without_degrees_of_freedom():
    x = _randn(3, 4)
    check_each_output(
        lambda a: [
            a.var(0, correction=3),
            a.var(correction=12),
            a.std(correction=12),
            a.var(0, correction=5),
        ],
        x,
    )


def test_std_of_constant_rows_is_flat():
    check_vjp(lambda a: a.std(1), _t([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]]))


def test_only_one_output_of_var_mean_used():
    x = _randn(3, 4)
    check_vjp(lambda a: torch.var_mean(a, 1)[0] * 2, x)
    check_vjp(lambda a: torch.std_mean(a, 0)[1].exp(), x)


# --- logsumexp and norms at the edges -------------------------------------------------------------


def test_logsumexp_with_infinities():
    check_vjp(lambda a: torch.logsumexp(a, 1), _t([[-INF, 0.0], [-INF, -INF], [INF, 1.0]]))


@pytest.mark.parametrize("ord", [1, 2, 3, 0.5, 1.5, INF, -INF, 0])
def test_vector_norm_of_zero_vectors(ord):
    check_vjp(
        lambda a: torch.linalg.vector_norm(a, ord, dim=1), _t([[0.0, 0.0, 0.0], [1.0, -2.0, 0.0]])
    )


def test_norm_entry_points():
    x = _randn(3, 4)
    check_each_output(
        lambda a: [
            a.norm(),
            a.norm(dim=1),
            a.norm(p=3, dim=0),
            torch.norm(a, p=1),
            torch.linalg.norm(a, dim=1),
            torch.nn.functional.normalize(a, dim=1),
        ],
        x,
    )


# --- scans ----------------------------------------------------------------------------------------


def test_cumsum_dims():
    x = _randn(2, 3, 4)
    check_each_output(
        lambda a: [a.cumsum(0), a.cumsum(-1), a.cumsum(1), torch.cumsum(a[0, 0], 0)], x
    )


# --- nondifferentiable reductions -----------------------------------------------------------------


def test_index_and_boolean_reductions_carry_no_gradient():
    x = _randn(3, 4)
    check_vjp(
        lambda a: (
            a * a.argmax(1, keepdim=True)
            + a * a.argmin()
            + torch.where(a.any(), a, -a)
            + a * (a > 0).all(1, keepdim=True)
            + a * torch.count_nonzero(a > 0, 1).unsqueeze(1)
        ),
        x,
    )


# --- dot-product test against forward mode --------------------------------------------------------

DOT = [
    ("sums", lambda a: a.sum(1) * a.mean(0).sum() + a.prod(1) + a.amax(0).sum()),
    ("moments", lambda a: a.var(1) + a.std(0).sum() + torch.var_mean(a, 1)[1]),
    ("lse_norm", lambda a: a.logsumexp(1) + torch.linalg.vector_norm(a, 3, dim=1)),
    ("scans", lambda a: (a.cumsum(1) * a.cumprod(1)).sum(1)),
    (
        "selecting",
        lambda a: a.sort(1).values[:, 0] + a.topk(2, dim=1).values.sum(1) + a.max(1).values,
    ),
]


@pytest.mark.parametrize("name,fn", DOT, ids=[d[0] for d in DOT])
def test_vjp_is_the_transpose_of_forward_mode(name, fn):
    a, u = _randn(3, 4, seed=1), _randn(3, 4, seed=2)
    out, ju = torch.func.jvp(fn, (a,), (u,))
    v = _randn(*out.shape, seed=3)
    _, (g,) = tv.vjp(fn)((a,), [v])
    torch.testing.assert_close((ju * v).sum(), (u * g).sum(), rtol=1e-10, atol=1e-10)


# --- every op of the brief has a rule -------------------------------------------------------------

COVERED = [
    aten.sum.default,
    aten.sum.dim_IntList,
    aten.mean.default,
    aten.mean.dim,
    aten.prod.default,
    aten.prod.dim_int,
    aten.amax.default,
    aten.amin.default,
    aten.var.correction,
    aten.std.correction,
    aten.var_mean.correction,
    aten.std_mean.correction,
    aten.logsumexp.default,
    aten.cumsum.default,
    aten.cumprod.default,
    aten.max.default,
    aten.min.default,
    aten.max.dim,
    aten.min.dim,
    aten.sort.default,
    aten.sort.stable,
    aten.topk.default,
    aten.linalg_vector_norm.default,
    aten.any.default,
    aten.all.default,
    aten.argmax.default,
    aten.argmin.default,
]


def test_brief_ops_have_rules():
    assert not [symbol_id(op) for op in COVERED if symbol_id(op) not in BUILTIN_RULES]
    for op in (aten.any.default, aten.all.dim, aten.argmax.default, aten.argmin.default):
        assert not BUILTIN_RULES.get(symbol_id(op)).differentiable
