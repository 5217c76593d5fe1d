"""Complex linear algebra against torch.autograd in complex128: solves on every side,
determinants, the factorizations (QR, Cholesky, Householder products, least squares) and
eigen- and singular vectors through losses that do not see their free phases."""

from __future__ import annotations

import pytest
import torch

from tests.autodiff.opinfo_samples import agrees_with_autograd

C128 = torch.complex128


def _positive_definite(n):
    a = torch.randn(n, n, dtype=C128)
    return a @ a.mH + n * torch.eye(n, dtype=C128)


def test_complex_solves_with_every_side_and_adjoint():
    torch.manual_seed(0)
    a, b = torch.randn(4, 4, dtype=C128), torch.randn(4, 3, dtype=C128)
    upper = torch.triu(a) + 4 * torch.eye(4, dtype=C128)
    factor = torch.linalg.cholesky(_positive_definite(4))
    cases = [
        (lambda a, b: torch.linalg.solve(a, b.mT, left=False), (a, b)),
        (
            lambda a, b: torch.linalg.solve_triangular(a.mT, b, upper=False, unitriangular=True),
            (upper, b),
        ),
        (lambda a, b: torch.linalg.solve_triangular(a, b.mT, upper=True, left=False), (upper, b)),
        (lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, adjoint=True), (a, b)),
        (lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b.mT, left=False), (a, b)),
        (lambda b, f: torch.cholesky_solve(b, f.mH, upper=True), (b, factor)),
        (lambda f: torch.cholesky_inverse(f.mH, upper=True), (factor,)),
        (lambda b, a: torch.triangular_solve(b, a, upper=False, transpose=True)[0], (b, upper.mT)),
        (lambda b, a: torch.triangular_solve(b, a, transpose=True, unitriangular=True), (b, upper)),
        (lambda a: torch.linalg.pinv(a.mT), (torch.randn(5, 3, dtype=C128),)),
    ]
    for fn, args in cases:
        agrees_with_autograd(fn, args, {})


def test_complex_determinant_including_a_singular_matrix():
    """d det / dA conjugated: g · conj(det) A⁻ᴴ, from the SVD (det(U) det(Vᴴ) is a phase)."""
    torch.manual_seed(0)
    singular = torch.randn(3, 2, dtype=C128) @ torch.randn(2, 3, dtype=C128)
    for a in (torch.randn(4, 4, dtype=C128), torch.randn(2, 3, 3, dtype=C128), singular):
        agrees_with_autograd(torch.linalg.det, (a,), {})


def test_complex_slogdet_sign_carries_the_phase():
    """A complex sign e^{iθ} has a gradient (θ = Im log det); a loss of the sign alone too."""
    torch.manual_seed(0)
    for a in (torch.randn(4, 4, dtype=C128), torch.randn(2, 3, 3, dtype=C128)):
        agrees_with_autograd(torch.linalg.slogdet, (a,), {})
        agrees_with_autograd(lambda a: torch.linalg.slogdet(a)[0], (a,), {})


@pytest.mark.parametrize("shape,k", [((5, 3), 3), ((4, 4), 2), ((2, 5, 2), 1)])
def test_complex_householder_product(shape, k):
    torch.manual_seed(0)
    a, tau = torch.randn(*shape, dtype=C128), torch.randn(*shape[:-2], k, dtype=C128)
    agrees_with_autograd(torch.linalg.householder_product, (a, tau), {})


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_complex_ormqr_on_either_side_and_adjoint(left, transpose):
    """Q's reflectors applied to C from the left or the right, Q or Qᴴ."""
    torch.manual_seed(0)
    a, tau = torch.randn(4, 3, dtype=C128), torch.randn(3, dtype=C128)
    c = torch.randn(*((4, 2) if left else (2, 4)), dtype=C128)
    agrees_with_autograd(lambda a, tau, c: torch.ormqr(a, tau, c, left, transpose), (a, tau, c), {})


@pytest.mark.parametrize("driver", [None, "gelsd"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_complex_least_squares_solution_and_residuals(shape, driver):
    """gelsd returns the residuals |AX - B|² (real) of a tall A: their gradient too."""
    torch.manual_seed(0)
    a, b = torch.randn(*shape, dtype=C128), torch.randn(*shape[:-1], 2, dtype=C128)
    agrees_with_autograd(lambda a, b: torch.linalg.lstsq(a, b, driver=driver)[:2], (a, b), {})


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
def test_complex_qr_both_factors(shape):
    """torch keeps the imaginary part of the diagonal of (R gRᴴ - gQᴴ Q)ᴴ."""
    torch.manual_seed(0)
    agrees_with_autograd(torch.linalg.qr, (torch.randn(*shape, dtype=C128),), {})


@pytest.mark.parametrize("upper", [False, True])
def test_complex_cholesky_of_an_unsymmetrized_input_matches_torch(upper):
    """torch's complex Cholesky gradient is not Hermitian (its diagonal keeps an imaginary
    part); an input the loss does not symmetrize shows it."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 4, dtype=C128)
    agrees_with_autograd(
        lambda a: torch.linalg.cholesky(a, upper=upper),
        (x @ x.mH + 4 * torch.eye(4, dtype=C128),),
        {},
    )


@pytest.mark.parametrize("dtype", [torch.float64, C128], ids=["real", "complex"])
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3)])
def test_eig_of_a_general_matrix_with_a_phase_invariant_loss(dtype, shape):
    """A general matrix's eigenvectors have unit norm and a free phase each: the loss sees
    L, |V| and V diag(f(L)) V⁻¹ (which is A's f); a real A gets the real part."""
    torch.manual_seed(0)
    a = torch.randn(*shape, dtype=dtype)
    weight = torch.randn(*shape, dtype=torch.float64)

    def loss(a):
        values, vectors = torch.linalg.eig(a)
        f_of_a = torch.linalg.solve(vectors.mT, (vectors * torch.exp(values).unsqueeze(-2)).mT).mT
        return (
            torch.view_as_real(values).sum()
            + (vectors.abs() * weight).sum()
            + (torch.view_as_real(f_of_a) * weight.unsqueeze(-1)).sum()
        )

    agrees_with_autograd(loss, (a,), {}, dtype)


@pytest.mark.parametrize("n", [3, 5])
def test_complex_eigh_with_a_phase_invariant_loss(n):
    """Eigenvectors of a Hermitian matrix have a free phase each: the loss sees V diag(f(L))
    Vᴴ, |V|² and L; the skew diagonal (rounding noise) must not be divided by 0."""
    torch.manual_seed(0)
    a = torch.randn(n, n, dtype=C128)
    weight, l_weight = torch.randn(n, n, dtype=C128), torch.randn(n, dtype=torch.float64)

    def loss(a):
        values, vectors = torch.linalg.eigh(a + a.mH)
        product = (vectors * torch.sin(values).to(C128).unsqueeze(-2)) @ vectors.mH
        return (
            torch.view_as_real(product * weight).sum()
            + (values * l_weight).sum()
            + (vectors.abs() ** 2 * weight.real).sum()
        )

    agrees_with_autograd(loss, (a,), {})


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3)])
@pytest.mark.parametrize("full_matrices", [False, True])
def test_complex_svd_with_a_phase_invariant_loss(shape, full_matrices):
    """Singular vectors are defined up to a phase e^{i phi} per pair: a loss of U diag(f(S))
    Vᴴ and of S does not see it, and needs torch's diagonal term diag(Uᴴ gU) / (2 S)
    (without it the gradient came out nan)."""
    torch.manual_seed(0)
    a, weight = torch.randn(*shape, dtype=C128), torch.randn(*shape, dtype=C128)
    k = min(shape[-2:])
    s_weight = torch.randn(*shape[:-2], k, dtype=torch.float64)

    def loss(a):
        u, s, vh = torch.linalg.svd(a, full_matrices=full_matrices)
        product = (u[..., :k] * torch.sin(s).to(C128).unsqueeze(-2)) @ vh[..., :k, :]
        return torch.view_as_real(product * weight).sum() + (s * s_weight).sum()

    agrees_with_autograd(loss, (a,), {})
