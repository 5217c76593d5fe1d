"""Grad rules for inverses, solves and determinants (formulas of torch's
`derivatives.yaml` / `FunctionsManual.cpp`, real matrices).

For X = A⁻¹B with cotangent g: gB = A⁻ᴴ g (one more solve, reusing A's LU factors where the
op returns them) and gA = -gB Xᴴ. Triangular solves keep only the triangle the op reads;
determinants use det(A)·A⁻ᴴ, the cofactor matrix. Least squares differentiates X = A⁺B
through the pseudo-inverse, as torch does.
"""

from __future__ import annotations

import torch

from thunderviz.autodiff.joint import get_grad, output_has_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import conj
from thunderviz.autodiff.rules.linalg_common import (
    eye_like,
    is_vector_rhs,
    matmul,
    mH,
    pinv_backward,
    solve_tri,
)
from thunderviz.prims import aten

RULES = RuleSet("linalg_solve")  # real matrices only: the sweep refuses complex ones


def _neg(x):
    return aten.neg.default(x)


@RULES.grad(aten.linalg_inv_ex.default, supports_complex=True)
def linalg_inv_ex(a, **kwargs):
    inverse, info = aten.linalg_inv_ex.default(a, **kwargs)
    g = get_grad(inverse)
    put_grad(a, _neg(matmul(mH(inverse), matmul(g, mH(inverse)))))
    return inverse, info


def _solve_grads(a, b, x, g, solve_adjoint, left):
    """gB = op(A)⁻ᴴ g through `solve_adjoint`, gA = -gB Xᴴ (left) or -Xᴴ gB (right)."""
    vector = is_vector_rhs(a, b)
    as_matrix = (lambda t: aten.unsqueeze.default(t, -1)) if vector else (lambda t: t)
    gb = solve_adjoint(as_matrix(g))
    if requires_grad(a):
        xm = as_matrix(x)
        put_grad(a, _neg(matmul(gb, mH(xm)) if left else matmul(mH(xm), gb)))
    if requires_grad(b):
        put_grad(b, aten.squeeze.dim(gb, -1) if vector else gb)


@RULES.grad(aten._linalg_solve_ex.default, supports_complex=True)
def linalg_solve_ex(a, b, left=True, check_errors=False):
    x, lu, pivots, info = aten._linalg_solve_ex.default(a, b, left=left, check_errors=check_errors)
    g = get_grad(x)
    # with A, not with its LU factors as eager's first backward does: the factors are
    # constants to autograd, so a gradient of this gradient (create_graph, outside the call
    # or inside it) would miss what flows through them; eager solves with A then too
    # (`linalg_solve_backward` asks GradMode). One more factorization, the second order right.
    _solve_grads(a, b, x, g, lambda t: aten._linalg_solve_ex.default(mH(a), t, left=left)[0], left)
    return x, lu, pivots, info


@RULES.grad(aten.linalg_solve_triangular.default, supports_complex=True)
def linalg_solve_triangular(a, b, *, upper, left=True, unitriangular=False):
    x = aten.linalg_solve_triangular.default(
        a, b, upper=upper, left=left, unitriangular=unitriangular
    )
    g = get_grad(x)
    gb = solve_tri(mH(a), g, upper=not upper, left=left, unitriangular=unitriangular)
    put_grad(b, gb)
    if requires_grad(a):
        ga = _neg(matmul(gb, mH(x)) if left else matmul(mH(x), gb))
        put_grad(a, _triangle(ga, upper, unitriangular))
    return x


def _triangle(t, upper, unitriangular):
    """The part of a gradient a triangular solve reads (no diagonal if it is implicit 1s)."""
    k = 1 if unitriangular else 0
    return aten.triu.default(t, k) if upper else aten.tril.default(t, -k)


@RULES.grad(aten.triangular_solve.default, supports_complex=True)
def triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    """The older API: solves op(A) X = B (op: A or Aᵀ, never conjugated) and also returns a
    copy of A, whose cotangent goes to A as it is. gB solves op(A)ᴴ gB = g, written with the
    op's own transposes: conj(solve(op(A)ᵀ, conj(g)))."""
    x, a_copy = aten.triangular_solve.default(b, a, upper, transpose, unitriangular)
    g, g_copy = get_grad(x), get_grad(a_copy)
    gb = conj(aten.triangular_solve.default(conj(g), a, upper, not transpose, unitriangular)[0])
    put_grad(b, gb)
    if requires_grad(a):
        ga = _neg(conj(matmul(x, mH(gb))) if transpose else matmul(gb, mH(x)))
        put_grad(a, aten.add.Tensor(_triangle(ga, upper, unitriangular), g_copy))
    return x, a_copy


@RULES.grad(aten.linalg_lu_solve.default, supports_complex=True)
def linalg_lu_solve(lu, pivots, b, *, left=True, adjoint=False):
    """torch's `linalg_lu_solve_LU` for the packed factors; B as in any solve."""
    x = aten.linalg_lu_solve.default(lu, pivots, b, left=left, adjoint=adjoint)
    g = get_grad(x)
    put_grad(b, aten.linalg_lu_solve.default(lu, pivots, g, left=left, adjoint=not adjoint))
    if requires_grad(lu):
        p, lower, upper = aten.lu_unpack.default(lu, pivots)
        if left != adjoint:
            gr = solve_tri(
                mH(upper), _neg(matmul(g if left else mH(g), mH(x) if left else x)), upper=False
            )
            gl = aten.tril.default(
                solve_tri(mH(lower), matmul(gr, mH(upper)), upper=True, unitriangular=True), -1
            )
            put_grad(lu, aten.add.Tensor(gl, aten.triu.default(gr)))
        else:
            gr = _neg(
                matmul(
                    matmul(
                        matmul(aten.transpose.int(p, -2, -1), x if left else mH(x)),
                        mH(g) if left else g,
                    ),
                    p,
                )
            )
            gr = solve_tri(mH(lower), gr, upper=True, left=False, unitriangular=True)
            gu = aten.triu.default(
                solve_tri(mH(upper), matmul(mH(lower), gr), upper=False, left=False)
            )
            put_grad(lu, aten.add.Tensor(aten.tril.default(gr, -1), gu))
    return x


# --- Cholesky ---------------------------------------------------------------------------------


def _cholesky_grad(g, lower_l, upper):
    """torch's `cholesky_backward` (Murray 2016): with Φ = tril(Lᴴ gL), half its diagonal,
    gA = sym(L⁻ᴴ Φ L⁻¹)."""
    if upper:
        lower_l, g = mH(lower_l), mH(g)
    l_inv = solve_tri(lower_l, eye_like(lower_l), upper=False)
    phi = aten.tril.default(matmul(mH(lower_l), g))
    if lower_l.dtype.is_complex:
        # torch's complex gradient is not Hermitian: Φ = (tril(X) + tril(X, -1)ᴴ) / 2, no
        # symmetrizing after (the real formula would drop the diagonal's imaginary part)
        phi = aten.mul.Tensor(aten.add.Tensor(phi, mH(aten.tril.default(phi, -1))), 0.5)
        return matmul(matmul(mH(l_inv), phi), l_inv)
    phi = aten.sub.Tensor(
        phi,
        aten.mul.Tensor(
            aten.diag_embed.default(aten.diagonal.default(phi, 0, -2, -1), 0, -2, -1), 0.5
        ),
    )
    ga = matmul(matmul(mH(l_inv), phi), l_inv)
    return aten.mul.Tensor(aten.add.Tensor(ga, mH(ga)), 0.5)


@RULES.grad(aten.linalg_cholesky_ex.default, supports_complex=True)
def linalg_cholesky_ex(a, *, upper=False, check_errors=False):
    factor, info = aten.linalg_cholesky_ex.default(a, upper=upper, check_errors=check_errors)
    put_grad(a, _cholesky_grad(get_grad(factor), factor, upper))
    return factor, info


if hasattr(torch.ops.aten, "cholesky"):  # torch.cholesky, deprecated, is gone in torch 2.14

    @RULES.grad(aten.cholesky.default, supports_complex=True)
    def cholesky(a, upper=False):
        factor = aten.cholesky.default(a, upper)
        put_grad(a, _cholesky_grad(get_grad(factor), factor, upper))
        return factor


@RULES.grad(aten.cholesky_solve.default, supports_complex=True)
def cholesky_solve(b, factor, upper=False):
    """X = (L Lᴴ)⁻¹ B: gB = (L Lᴴ)⁻¹ g; the factor's gradient is -(gB Xᴴ + X gBᴴ) L (lower)."""
    x = aten.cholesky_solve.default(b, factor, upper)
    g = get_grad(x)
    gb = aten.cholesky_solve.default(g, factor, upper)
    put_grad(b, gb)
    if requires_grad(factor):
        common = matmul(gb, mH(x))
        common = aten.add.Tensor(common, mH(common))
        put_grad(factor, _neg(matmul(factor, common) if upper else matmul(common, factor)))
    return x


@RULES.grad(aten.cholesky_inverse.default, supports_complex=True)
def cholesky_inverse(factor, upper=False):
    inverse = aten.cholesky_inverse.default(factor, upper)
    g = get_grad(inverse)
    common = matmul(inverse, matmul(aten.add.Tensor(g, mH(g)), inverse))
    put_grad(factor, _neg(matmul(factor, common) if upper else matmul(common, factor)))
    return inverse


# --- determinants ----------------------------------------------------------------------------


def _times_inverse_h(a, scale):
    """scale[..., None, None] · A⁻ᴴ. (Not from the LU factors the op returns: torch factors
    Aᵀ or A depending on A's memory layout, which a trace does not know.) A singular A gives
    infs, as autograd does, not an error."""
    eye = aten.mul.Tensor(
        eye_like(a), aten.unsqueeze.default(aten.unsqueeze.default(scale, -1), -1)
    )
    return aten.linalg_solve_ex.default(mH(a), eye)[0]


@RULES.grad(aten._linalg_det.default, supports_complex=True)
def linalg_det(a):
    """d det / dA is the cofactor matrix, det(A) A⁻ᴴ where A is invertible. Computed from the
    SVD A = U diag(s) Vᴴ as det(U) det(Vᴴ) U diag(prod_{j≠i} s_j) Vᴴ, which stays exact for
    singular and nearly singular A (A⁻ᴴ does not exist or is noise there)."""
    det, lu, pivots = aten._linalg_det.default(a)
    g = get_grad(det)
    if a.shape[-1] == 0:  # 0 x 0 matrices: det is 1, the gradient is empty
        put_grad(a, aten.zeros_like.default(a))
        return det, lu, pivots
    u, s, vh = aten._linalg_svd.default(a)
    others = aten.mul.Tensor(
        _exclusive_cumprod(s),
        aten.flip.default(_exclusive_cumprod(aten.flip.default(s, [-1])), [-1]),
    )
    # det(U) det(Vᴴ): ±1 for real A, a phase for complex A (conjugated: g · conj(d det/dA))
    signs = conj(aten.mul.Tensor(aten.linalg_det.default(u), aten.linalg_det.default(vh)))
    weights = aten.mul.Tensor(others, aten.unsqueeze.default(aten.mul.Tensor(g, signs), -1))
    put_grad(a, matmul(aten.mul.Tensor(u, aten.unsqueeze.default(weights, -2)), vh))
    return det, lu, pivots


def _exclusive_cumprod(s):
    """[1, s0, s0 s1, ...] along the last dim."""
    ones = aten.ones_like.default(aten.narrow.default(s, -1, 0, 1))
    shifted = aten.cat.default([ones, aten.narrow.default(s, -1, 0, s.shape[-1] - 1)], -1)
    return aten.cumprod.default(shifted, -1)


@RULES.grad(aten._linalg_slogdet.default, supports_complex=True)
def linalg_slogdet(a):
    """d log|det A| / dA = A⁻ᴴ; a real sign is piecewise constant (no gradient). A complex
    sign is the phase e^{iθ} of det, θ = Im(log det): its cotangent adds i Im(gsign ·
    conj(sign)) to the scale of A⁻ᴴ (slogdet_backward)."""
    sign, logabsdet, lu, pivots = aten._linalg_slogdet.default(a)
    g = get_grad(logabsdet)
    if a.dtype.is_complex:
        turn = aten.imag.default(aten.mul.Tensor(get_grad(sign), conj(sign)))
        g = aten.complex.default(g, turn)
    put_grad(a, _times_inverse_h(a, g))
    return sign, logabsdet, lu, pivots


@RULES.grad(aten.linalg_lstsq.default, supports_complex=True)
def linalg_lstsq(a, b, rcond=None, *, driver=None):
    """X = A⁺B (torch's `linalg_lstsq_backward`): gB = A⁺ᴴ gX, and gA through the
    pseudo-inverse (`pinv_backward` of gX Bᴴ). The residuals |AX - B|² a driver returns (one
    per column of B) add their own term: X minimises them, so only how they depend on A and
    B directly counts, 2R·gL Xᴴ for A and -2R·gL for B, with R = AX - B. Rank and singular
    values carry no gradient."""
    x, residuals, rank, singular_values = aten.linalg_lstsq.default(a, b, rcond, driver=driver)
    vector = is_vector_rhs(a, b)
    as_matrix = (lambda t: aten.unsqueeze.default(t, -1)) if vector else (lambda t: t)
    bm, xm = as_matrix(b), as_matrix(x)
    ga = gb = None
    if output_has_grad(0):
        gx = as_matrix(get_grad(x))
        pinv = aten.linalg_pinv.atol_rtol_tensor(a)
        if requires_grad(a):
            ga = pinv_backward(matmul(gx, mH(bm)), pinv, a)
        if requires_grad(b):
            gb = matmul(mH(pinv), gx)
    if output_has_grad(1) and residuals.numel > 0:
        # per column: the cotangent of each residual, spread over the rows of R
        gl = aten.unsqueeze.default(get_grad(residuals), -2)
        two_r_gl = aten.mul.Tensor(aten.sub.Tensor(matmul(a, xm), bm), aten.mul.Tensor(gl, 2))
        from_residuals_a = matmul(two_r_gl, mH(xm))
        ga = from_residuals_a if ga is None else aten.add.Tensor(ga, from_residuals_a)
        neg = _neg(two_r_gl)
        gb = neg if gb is None else aten.add.Tensor(gb, neg)
    if ga is not None and requires_grad(a):
        put_grad(a, ga)
    if gb is not None and requires_grad(b):
        put_grad(b, aten.squeeze.dim(gb, -1) if vector else gb)
    return x, residuals, rank, singular_values
