"""Grad rules for matrix factorizations and what is computed from them: LU, QR, SVD,
symmetric eigendecomposition, pseudo-inverse, matrix exponential, Householder products
(formulas of torch's `FunctionsManual.cpp`, real matrices).

Where a factor's cotangent may be absent (autodiff then feeds zeros), divisions by
eigenvalue or singular-value gaps use `safe_div`, so repeated values with no cotangent give
0 as in autograd. Ops that skip the vectors (`eigvalsh`, `svdvals`) recompute them in the
forward: the gradient needs them.
"""

from __future__ import annotations

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, output_has_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import conj, unary
from thunderviz.autodiff.rules.linalg_common import (
    diag_embed,
    matmul,
    mH,
    pinv_backward,
    safe_div,
    solve_tri,
)
from thunderviz.prims import aten

RULES = RuleSet("linalg_factor")  # real matrices only: the sweep refuses complex ones


def _add(*ts):
    out = ts[0]
    for t in ts[1:]:
        out = aten.add.Tensor(out, t)
    return out


# --- LU ---------------------------------------------------------------------------------------


def _lu_grad(gl, gu, p, lower, upper):
    """torch's `linalg_lu_backward` for A = P L U (L: m x k unit lower, U: k x n upper)."""
    m, n = lower.shape[-2], upper.shape[-1]
    if m == n:
        ga = _add(
            aten.tril.default(matmul(mH(lower), gl), -1), aten.triu.default(matmul(gu, mH(upper)))
        )
        ga = solve_tri(mH(upper), ga, upper=False, left=False)
        ga = solve_tri(mH(lower), ga, upper=True, unitriangular=True)
    elif m < n:  # wide: U = [U1 | U2]
        u1, gu1 = aten.narrow.default(upper, -1, 0, m), aten.narrow.default(gu, -1, 0, m)
        gu2 = aten.narrow.default(gu, -1, m, n - m)
        ga = aten.sub.Tensor(matmul(mH(lower), gl), matmul(aten.triu.default(gu), mH(upper)))
        ga = solve_tri(mH(u1), aten.tril.default(ga, -1), upper=False, left=False)
        ga = aten.cat.default([aten.add.Tensor(ga, aten.triu.default(gu1)), gu2], -1)
        ga = solve_tri(mH(lower), ga, upper=True, unitriangular=True)
    else:  # tall: L = [L1; L2]
        l1, gl1 = aten.narrow.default(lower, -2, 0, n), aten.narrow.default(gl, -2, 0, n)
        gl2 = aten.narrow.default(gl, -2, n, m - n)
        ga = aten.sub.Tensor(matmul(gu, mH(upper)), matmul(mH(lower), aten.tril.default(gl, -1)))
        ga = solve_tri(mH(l1), aten.triu.default(ga), upper=True, unitriangular=True)
        ga = aten.cat.default([aten.add.Tensor(ga, aten.tril.default(gl1, -1)), gl2], -2)
        ga = solve_tri(mH(upper), ga, upper=False, left=False)
    return matmul(p, ga)


def _constant_permutation(p) -> None:
    """The permutation P is piecewise constant in A: a gradient reaching it (a gradient of a
    gradient that reads P) goes nowhere, as in eager."""
    if output_has_grad(0):
        get_grad(p)


@RULES.grad(aten.linalg_lu.default, supports_complex=True)
def linalg_lu(a, *, pivot=True):
    p, lower, upper = aten.linalg_lu.default(a, pivot=pivot)
    gl, gu = get_grad(lower), get_grad(upper)
    _constant_permutation(p)
    put_grad(a, _lu_grad(gl, gu, p, lower, upper))
    return p, lower, upper


@RULES.grad(aten.linalg_lu_factor_ex.default, supports_complex=True)
def linalg_lu_factor_ex(a, *, pivot=True, check_errors=False):
    """The packed factors: L below the diagonal, U on and above it."""
    lu, pivots, info = aten.linalg_lu_factor_ex.default(a, pivot=pivot, check_errors=check_errors)
    g = get_grad(lu)
    p, lower, upper = aten.lu_unpack.default(lu, pivots)
    k = min(a.shape[-2], a.shape[-1])
    put_grad(
        a,
        _lu_grad(
            aten.narrow.default(g, -1, 0, k), aten.narrow.default(g, -2, 0, k), p, lower, upper
        ),
    )
    return lu, pivots, info


@RULES.grad(aten.lu_unpack.default, supports_complex=True)  # linear: parts of lu
def lu_unpack(lu, pivots, unpack_data=True, unpack_pivots=True):
    """L and U are the lower and upper parts of the packed LU (L's unit diagonal is not)."""
    p, lower, upper = aten.lu_unpack.default(lu, pivots, unpack_data, unpack_pivots)
    gl, gu = get_grad(lower), get_grad(upper)
    _constant_permutation(p)
    if requires_grad(lu) and unpack_data:
        m, n = lu.shape[-2], lu.shape[-1]
        k = min(m, n)
        low = aten.tril.default(gl, -1)
        up = aten.triu.default(gu)
        # L is m x k, U is k x n: place both in the m x n packed layout
        low = aten.constant_pad_nd.default(low, [0, n - k, 0, 0])
        up = aten.constant_pad_nd.default(up, [0, 0, 0, m - k])
        put_grad(lu, aten.add.Tensor(low, up))
    return p, lower, upper


# --- QR ---------------------------------------------------------------------------------------


def _copyltu(m):
    """The symmetric matrix with m's lower triangle."""
    return aten.add.Tensor(aten.tril.default(m), mH(aten.tril.default(m, -1)))


def _qr_grad_tall(gq, gr, q, r):
    """A = QR with m >= n (Walter & Lehmann; Seeger et al. 2017):
    gA = (gQ + Q copyltu(M)) R⁻ᴴ with M = R gRᴴ - gQᴴ Q."""
    m_ = aten.sub.Tensor(matmul(r, mH(gr)), matmul(mH(gq), q))
    sym = _copyltu(m_)
    if m_.dtype.is_complex:  # torch keeps the imaginary part of diag(Mᴴ): add -i Im(diag M)
        im = aten.neg.default(aten.imag.default(aten.diagonal.default(m_, 0, -2, -1)))
        sym = aten.add.Tensor(
            sym, diag_embed(aten.complex.default(aten.zeros_like.default(im), im))
        )
    b = aten.add.Tensor(gq, matmul(q, sym))
    return solve_tri(mH(r), b, upper=False, left=False)


@RULES.grad(aten.linalg_qr.default, supports_complex=True)
def linalg_qr(a, mode="reduced"):
    m, n = a.shape[-2], a.shape[-1]
    if mode == "r" or (mode == "complete" and m > n):
        raise AutodiffError(
            f"linalg.qr(mode={mode!r}) is not differentiable (Q is not "
            "computed, or not unique); use mode='reduced'"
        )
    q, r = aten.linalg_qr.default(a, mode)
    gq, gr = get_grad(q), get_grad(r)
    if m >= n:
        put_grad(a, _qr_grad_tall(gq, gr, q, r))
    else:  # A = Q [R1 | R2] = [X | Y]: X = Q R1 is square-ish, Y = Q R2
        r1, r2 = aten.narrow.default(r, -1, 0, m), aten.narrow.default(r, -1, m, n - m)
        gr1, gr2 = aten.narrow.default(gr, -1, 0, m), aten.narrow.default(gr, -1, m, n - m)
        y = matmul(q, r2)
        gx = _qr_grad_tall(aten.add.Tensor(gq, matmul(y, mH(gr2))), gr1, q, r1)
        put_grad(a, aten.cat.default([gx, matmul(q, gr2)], -1))
    return q, r


# --- SVD and symmetric eigendecomposition ----------------------------------------------------


def _svd_grad(gu, gs, gvh, u, s, vh):
    """torch's `svd_backward` for the reduced SVD A = U diag(S) Vᴴ."""
    m, n = u.shape[-2], vh.shape[-1]
    s_row, s_col = aten.unsqueeze.default(s, -2), aten.unsqueeze.default(s, -1)
    if gu is None and gvh is None:
        return matmul(aten.mul.Tensor(u, aten.unsqueeze.default(gs, -2)), vh)
    s2 = aten.mul.Tensor(s, s)
    # S_j² - S_i², with 1 on the diagonal as torch's E: the numerator's diagonal is 0 for
    # real matrices and, for complex ones, is kept (it cancels for phase-invariant losses)
    gap = aten.add.Tensor(
        aten.sub.Tensor(aten.unsqueeze.default(s2, -2), aten.unsqueeze.default(s2, -1)),
        diag_embed(aten.ones_like.default(s)),
    )
    uhgu = matmul(mH(u), gu)
    vhgv = matmul(vh, mH(gvh))
    skew_u, skew_v = aten.sub.Tensor(uhgu, mH(uhgu)), aten.sub.Tensor(vhgv, mH(vhgv))
    inner = safe_div(
        aten.add.Tensor(aten.mul.Tensor(skew_u, s_row), aten.mul.Tensor(s_col, skew_v)), gap
    )
    inner = aten.add.Tensor(inner, diag_embed(gs))
    if u.dtype.is_complex:  # the phase of each singular pair: diag(U^H gU) / (2 S)
        phase = aten.div.Tensor(aten.diagonal.default(skew_u, 0, -2, -1), aten.mul.Tensor(s, 2))
        inner = aten.add.Tensor(inner, diag_embed(phase))
    if m > n:  # the part of gU outside U's columns
        gu_sinv = aten.div.Tensor(gu, s_row)
        ga = _add(matmul(u, inner), gu_sinv, aten.neg.default(matmul(u, matmul(mH(u), gu_sinv))))
        return matmul(ga, vh)
    if m < n:
        sinv_gvh = aten.div.Tensor(gvh, s_col)
        ga = _add(
            matmul(inner, vh), sinv_gvh, aten.neg.default(matmul(matmul(sinv_gvh, mH(vh)), vh))
        )
        return matmul(u, ga)
    return matmul(u, matmul(inner, vh))


@RULES.grad(aten._linalg_svd.default, supports_complex=True)
def linalg_svd(a, full_matrices=False, compute_uv=True, **kwargs):
    u, s, vh = aten._linalg_svd.default(a, full_matrices, compute_uv, **kwargs)
    if not compute_uv:  # svdvals: the gradient is U diag(gS) Vᴴ
        fu, _, fvh = aten._linalg_svd.default(a, False, True, **kwargs)
        put_grad(a, _svd_grad(None, get_grad(s), None, fu, s, fvh))
        return u, s, vh
    gu, gs, gvh = get_grad(u), get_grad(s), get_grad(vh)
    if full_matrices:  # only the first k = len(S) columns of U / rows of Vᴴ enter A
        k = s.shape[-1]
        put_grad(
            a,
            _svd_grad(
                aten.narrow.default(gu, -1, 0, k),
                gs,
                aten.narrow.default(gvh, -2, 0, k),
                aten.narrow.default(u, -1, 0, k),
                s,
                aten.narrow.default(vh, -2, 0, k),
            ),
        )
    else:
        put_grad(a, _svd_grad(gu, gs, gvh, u, s, vh))
    return u, s, vh


@RULES.grad(aten._linalg_eigh.default, supports_complex=True)
def linalg_eigh(a, UPLO="L", compute_v=True):  # noqa: N803 - torch's argument name
    """A = V diag(L) Vᴴ: gA = V (diag(gL) + skew(Vᴴ gV) / (L_j - L_i)) Vᴴ."""
    values, vectors = aten._linalg_eigh.default(a, UPLO, compute_v)
    v = vectors if compute_v else aten._linalg_eigh.default(a, UPLO, True)[1]
    gl = get_grad(values)
    inner = diag_embed(gl)
    if compute_v:
        gv = get_grad(vectors)
        vhgv = matmul(mH(v), gv)
        skew = aten.mul.Tensor(aten.sub.Tensor(vhgv, mH(vhgv)), 0.5)
        # 1 on the diagonal (torch's E): the diagonal is dropped below, and a complex
        # skew's diagonal (rounding noise for a phase-invariant loss) must not become inf
        gap = aten.add.Tensor(
            aten.sub.Tensor(aten.unsqueeze.default(values, -2), aten.unsqueeze.default(values, -1)),
            diag_embed(aten.ones_like.default(values)),
        )
        off = safe_div(skew, gap)
        off = aten.sub.Tensor(off, diag_embed(aten.diagonal.default(off, 0, -2, -1)))
        inner = aten.add.Tensor(inner, off)
    put_grad(a, matmul(v, matmul(inner, mH(v))))
    return values, vectors


@RULES.grad(aten.linalg_eig.default, supports_complex=True)
def linalg_eig(a):
    """A V = V diag(L), V's columns of unit norm: gA = V⁻ᴴ (diag(gL) + (Vᴴ gV - VᴴV
    diag(Re diag(Vᴴ gV))) / Ē) Vᴴ, E_ij = L_j - L_i off the diagonal (torch's
    `linalg_eig_backward`; the second term is what the normalization leaves of gV). The
    outputs are complex for a real A too, which then gets the real part."""
    values, vectors = aten.linalg_eig.default(a)
    gl = get_grad(values)
    inner = diag_embed(gl)
    if output_has_grad(1):
        gv = get_grad(vectors)
        vh = mH(vectors)
        vhgv = matmul(vh, gv)
        # VᴴV diag(d) scales VᴴV's columns by d, a real vector
        d = aten.real.default(aten.diagonal.default(vhgv, 0, -2, -1))
        projected = aten.sub.Tensor(
            vhgv, aten.mul.Tensor(matmul(vh, vectors), aten.unsqueeze.default(d, -2))
        )
        conj_values = conj(values)
        gap = aten.add.Tensor(
            aten.sub.Tensor(
                aten.unsqueeze.default(conj_values, -2), aten.unsqueeze.default(conj_values, -1)
            ),
            diag_embed(aten.ones_like.default(values)),
        )
        off = aten.div.Tensor(projected, gap)
        off = aten.sub.Tensor(off, diag_embed(aten.diagonal.default(off, 0, -2, -1)))
        inner = aten.add.Tensor(inner, off)
    vh = mH(vectors)
    ga = aten._linalg_solve_ex.default(vh, matmul(inner, vh))[0]
    put_grad(a, ga if a.dtype.is_complex else aten.real.default(ga))
    return values, vectors


# --- pseudo-inverse, matrix exponential -----------------------------------------


for _op in (
    aten.linalg_pinv.atol_rtol_tensor,
    aten.linalg_pinv.atol_rtol_float,
    aten.linalg_pinv.default,
    aten.linalg_pinv.rcond_tensor,
):
    unary(RULES, _op, lambda g, a, out: pinv_backward(g, out, a), supports_complex=True)


@RULES.grad(aten.linalg_matrix_exp.default, supports_complex=True)
def linalg_matrix_exp(a):
    """The adjoint of exp's differential: exp([[Aᴴ, g], [0, Aᴴ]]) holds it in its
    upper-right block."""
    out = aten.linalg_matrix_exp.default(a)
    g = get_grad(out)
    n = a.shape[-1]
    ah = mH(a)
    zeros = aten.zeros_like.default(ah)
    block = aten.cat.default([aten.cat.default([ah, g], -1), aten.cat.default([zeros, ah], -1)], -2)
    big = aten.linalg_matrix_exp.default(block)
    put_grad(a, aten.narrow.default(aten.narrow.default(big, -2, 0, n), -1, n, n))
    return out


# --- Householder products (QR's compact form) -------------------------------------------------


def _reflect(x, v, tau):
    """H x with H = I - τ v vᴴ: v is (..., m, 1), τ is (..., 1, 1)."""
    return aten.sub.Tensor(x, aten.mul.Tensor(tau, matmul(v, matmul(mH(v), x))))


def _reflect_vjp(gy, x, v, tau):
    """For Y = X - τ v (vᴴX), the cotangents of X, v and τ (torch's convention: the
    conjugate of the derivative times the cotangent, and for v, which also enters through
    vᴴ, the derivative as to v̄ times the conjugate cotangent)."""
    w = matmul(mH(v), x)  # vᴴX, (..., 1, n)
    u = matmul(mH(v), gy)  # vᴴG
    gx = aten.sub.Tensor(gy, aten.mul.Tensor(conj(tau), matmul(v, u)))
    gv = aten.neg.default(
        _add(
            aten.mul.Tensor(conj(tau), matmul(gy, mH(w))),
            aten.mul.Tensor(tau, matmul(x, matmul(mH(gy), v))),
        )
    )
    gtau = aten.neg.default(aten.sum.dim_IntList(aten.mul.Tensor(conj(w), u), [-2, -1], True))
    return gx, gv, gtau


def _householder_vectors(a, k):
    """v_i, column i of A below its diagonal with a 1 on it (`geqrf`'s compact form), as
    (..., m, 1) columns for i < k, and the mask of the entries of A they hold."""
    m = a.shape[-2]
    below = aten.tril.default(aten.ones.default([m, k], dtype=a.dtype, device=a.device), -1)
    unit = aten.eye.m(m, k, dtype=a.dtype, device=a.device)
    vs = aten.add.Tensor(aten.mul.Tensor(aten.narrow.default(a, -1, 0, k), below), unit)
    return [aten.narrow.default(vs, -1, i, 1) for i in range(k)], below


def _reflections_vjp(x, g, a, tau, adjoint):
    """For Y = Q X (Qᴴ X if `adjoint`), Q = H_0⋯H_{k-1} from A and τ: the cotangents of X,
    A and τ for Y's cotangent g. Q X applies H_{k-1} first, Qᴴ X applies H_0ᴴ first (Hᴴ is
    the reflector of conj(τ)); the input of each is rebuilt in the forward and the cotangent
    walks back through each (`_reflect_vjp`). A gets those of the entries it holds."""
    k = tau.shape[-1]
    if k == 0:  # no reflector: Q is the identity
        return g, aten.zeros_like.default(a), aten.zeros_like.default(tau)
    v, below = _householder_vectors(a, k)
    t = [aten.unsqueeze.default(aten.narrow.default(tau, -1, i, 1), -1) for i in range(k)]
    order = list(range(k)) if adjoint else list(reversed(range(k)))
    inputs = [x]  # inputs[j]: what the j-th reflector applied is applied to
    for i in order[:-1]:
        inputs.append(_reflect(inputs[-1], v[i], conj(t[i]) if adjoint else t[i]))
    gvs, gtaus = [None] * k, [None] * k
    for j in reversed(range(k)):
        i = order[j]
        g, gv, gt = _reflect_vjp(g, inputs[j], v[i], conj(t[i]) if adjoint else t[i])
        gvs[i] = gv
        gtaus[i] = aten.squeeze.dims(conj(gt) if adjoint else gt, [-2, -1])
    ga = aten.mul.Tensor(aten.cat.default(gvs, -1), below)
    n = a.shape[-1]
    return (
        g,
        aten.constant_pad_nd.default(ga, [0, n - k]) if n > k else ga,
        aten.stack.default(gtaus, -1),
    )


@RULES.grad(aten.linalg_householder_product.default, supports_complex=True)
def linalg_householder_product(a, tau):
    """The first n columns of Q = H_0⋯H_{k-1}, H_i = I - τ_i v_i v_iᴴ: Q applied to the
    first n columns of the identity (what `orthogonal` parametrizes a non-square weight
    with)."""
    out = aten.linalg_householder_product.default(a, tau)
    g = get_grad(out)
    m, n = a.shape[-2], a.shape[-1]
    identity = aten.eye.m(m, n, dtype=a.dtype, device=a.device)
    _, ga, gtau = _reflections_vjp(identity, g, a, tau, adjoint=False)
    put_grad(a, ga)
    put_grad(tau, gtau)
    return out


@RULES.grad(aten.ormqr.default, supports_complex=True)
def ormqr(a, tau, c, left=True, transpose=False):
    """op(Q) C or C op(Q), Q from A and τ as `householder_product`'s; on the right, through
    its conjugate transpose, op(Q)ᴴ Cᴴ."""
    out = aten.ormqr.default(a, tau, c, left, transpose)
    g = get_grad(out)
    if left:
        gc, ga, gtau = _reflections_vjp(c, g, a, tau, adjoint=transpose)
    else:
        gc_h, ga, gtau = _reflections_vjp(mH(c), mH(g), a, tau, adjoint=not transpose)
        gc = mH(gc_h)
    put_grad(a, ga)
    put_grad(tau, gtau)
    put_grad(c, gc)
    return out
