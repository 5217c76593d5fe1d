"""Grad rules for solves, determinants and factorizations (rules/linalg_solve.py,
rules/linalg_factor.py) against torch.autograd in float64, on torch's OpInfo samples and on
the cases samples rarely reach (singular det, wide QR, full_matrices SVD, one output's
cotangent alone)."""

from __future__ import annotations

import copy

import pytest
import torch

import thunderviz as tv
from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_each_output, check_vjp

F64 = torch.float64

SOLVE_OPS = [
    "linalg.solve",
    "linalg.solve_ex",
    "linalg.tensorsolve",
    "linalg.inv",
    "linalg.inv_ex",
    "linalg.tensorinv",
    "linalg.det",
    "logdet",
    "linalg.slogdet",
    "linalg.cholesky",
    "linalg.cholesky_ex",
    "cholesky",
    "cholesky_inverse",
    "cholesky_solve",
    "linalg.solve_triangular",
    "triangular_solve",
    "lu_solve",
    "linalg.lu_solve",
    "linalg.lstsq",
]
FACTOR_OPS = [
    "lu",
    "linalg.lu",
    "linalg.lu_factor",
    "linalg.lu_factor_ex",
    "lu_unpack",
    "qr",
    "linalg.qr",
    "svd",
    "linalg.svd",
    "linalg.svdvals",
    ("norm", "nuc"),
    "linalg.cond",
    "linalg.eigh",
    "linalg.eigvalsh",
    "pinverse",
    "linalg.pinv",
    ("linalg.pinv", "hermitian"),
    "matrix_exp",
    "linalg.householder_product",
    "ormqr",
]


def _check(fn, args, kwargs):
    # kwargs go through a closure: pinv's own `rtol`/`atol` are not check_vjp's tolerances
    check_vjp(lambda *a: fn(*a, **kwargs), *args, rtol=1e-6, atol=1e-8)


# processed: the outputs torch's own gradient tests use (no permutation matrix, no pivots)
@pytest.mark.parametrize(
    "fn,args,kwargs", sample_params(SOLVE_OPS, limit=3, spread=True, processed=True)
)
def test_solve_and_det_opinfo(fn, args, kwargs):
    _check(fn, args, kwargs)


@pytest.mark.parametrize(
    "fn,args,kwargs", sample_params(FACTOR_OPS, limit=3, spread=True, processed=True)
)
def test_factorization_opinfo(fn, args, kwargs):
    _check(fn, args, kwargs)


def _random(*shape, seed=0):
    return torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _cofactors(a):
    """The cofactor matrix from its definition: signed determinants of the minors."""
    n = a.shape[-1]
    out = torch.empty_like(a)
    for i in range(n):
        for j in range(n):
            minor = torch.cat([a[..., :i, :], a[..., i + 1 :, :]], -2)
            minor = torch.cat([minor[..., :j], minor[..., j + 1 :]], -1)
            out[..., i, j] = (-1) ** (i + j) * torch.linalg.det(minor)
    return out


def test_det_of_a_singular_matrix_is_the_cofactor_matrix():
    """Against the definition, not autograd: on a (nearly) singular matrix autograd solves
    with A's LU factors, whose result there is rounding noise."""
    a = _random(4, 4)
    a[:, 3] = a[:, 0] + 2 * a[:, 1]  # rank 3: det 0, cofactor matrix not 0
    a = torch.stack([a, _random(4, 4, seed=1)])
    g = _random(2, seed=2)
    _, (grad,) = tv.vjp(torch.linalg.det)((a,), g)
    torch.testing.assert_close(grad, g[:, None, None] * _cofactors(a))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 5, 3)])
def test_each_factor_alone(shape):
    """One factor's cotangent at a time (the others get none, autodiff feeds zeros)."""
    a = _random(*shape)
    check_each_output(lambda a: torch.linalg.qr(a), a)
    check_each_output(lambda a: torch.linalg.svd(a, full_matrices=False), a)
    check_each_output(lambda a: torch.linalg.lu(a), a)


def test_svd_full_matrices_uses_the_first_columns():
    a = _random(5, 3)
    check_vjp(lambda a: torch.linalg.svd(a, full_matrices=True)[1], a)
    check_vjp(lambda a: (lambda u, s, vh: (u[:, :3] * s) @ vh)(*torch.linalg.svd(a)), a)


def test_eigh_with_a_repeated_eigenvalue_and_no_vector_cotangent():
    q, _ = torch.linalg.qr(_random(4, 4))
    a = q @ torch.diag(torch.tensor([1.0, 1.0, 2.0, 3.0], dtype=F64)) @ q.T
    check_vjp(torch.linalg.eigvalsh, a)
    check_vjp(lambda a: torch.linalg.eigh(a).eigenvalues, a)


def test_qr_reduced_r_only_mode_is_refused():
    with pytest.raises(tv.AutodiffError, match="mode='r'"):
        tv.vjp(lambda a: torch.linalg.qr(a, mode="r")[1])((_random(4, 3),), _random(3, 3))


@pytest.mark.parametrize("driver", [None, "gelsd", "gels"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)], ids=["tall", "wide", "batched"])
@pytest.mark.parametrize("vector", [False, True], ids=["matrix_b", "vector_b"])
def test_least_squares_solution_and_residuals(driver, shape, vector):
    """Each output of `linalg.lstsq` alone: the solution, and the residuals the drivers
    other than the CPU's default (gelsy) return for a tall full-rank A."""
    if driver == "gels" and shape[-2] < shape[-1]:
        pytest.skip("gels needs a full-rank tall or square A")
    a = _random(*shape, seed=1)
    b = _random(*shape[:-1], *(() if vector else (2,)), seed=2)
    check_each_output(
        lambda a, b: torch.linalg.lstsq(a, b, driver=driver)[:2], a, b, rtol=1e-6, atol=1e-8
    )


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("shape,k", [((5, 3), 3), ((4, 4), 2), ((2, 4, 2), 2)])
def test_householder_products_and_their_application(left, transpose, shape, k):
    """Q from A's reflectors below the diagonal (k of them), and Q applied to C on either
    side, transposed or not (`householder_product`, `ormqr`)."""
    a, tau = _random(*shape, seed=3), _random(*shape[:-2], k, seed=4)
    check_vjp(torch.linalg.householder_product, a, tau, rtol=1e-6, atol=1e-8)
    m, n = shape[-2], shape[-1]
    if k == min(m, n):  # ormqr wants as many reflectors as min(A's rows, A's columns)
        c = _random(*shape[:-2], *((m, 3) if left else (3, m)), seed=5)
        check_vjp(lambda a, tau, c: torch.ormqr(a, tau, c, left, transpose), a, tau, c)


def test_an_orthogonal_parametrization_of_a_non_square_weight_trains_as_in_eager():
    """torch's `orthogonal` makes a non-square weight with `householder_product`."""
    from torch.nn.utils.parametrizations import orthogonal

    torch.manual_seed(0)
    model = orthogonal(torch.nn.Linear(6, 4)).double()
    eager = copy.deepcopy(model)
    x = _random(3, 6, seed=6)
    tv.jit(model)(x).square().sum().backward()
    eager(x).square().sum().backward()
    for (name, mine), theirs in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-10, atol=1e-12, msg=name)
