"""Matrix helpers the linear-algebra rule files share (math only: no machinery)."""

from __future__ import annotations

from thunderviz.prims import aten


def mT(x):
    """The batched transpose of the last two dims."""
    return aten.transpose.int(x, -2, -1)


def mH(x):
    """The batched conjugate transpose."""
    return aten.conj_physical.default(mT(x)) if x.dtype.is_complex else mT(x)


def matmul(a, b):
    return aten.matmul.default(a, b)


def eye_like(x, n=None):
    """An n x n identity (n: x's last dim) with x's dtype and device."""
    n = x.shape[-1] if n is None else n
    return aten.eye.default(n, dtype=x.dtype, device=x.device)


def diag_embed(v):
    return aten.diag_embed.default(v, 0, -2, -1)


def solve_tri(a, b, *, upper, left=True, unitriangular=False):
    return aten.linalg_solve_triangular.default(
        a, b, upper=upper, left=left, unitriangular=unitriangular
    )


def is_vector_rhs(a, b) -> bool:
    """torch's rule for solve-like ops: b is a (batch of) vector(s), not matrices."""
    return b.ndim == 1 or (a.ndim - 1 == b.ndim and tuple(b.shape) == tuple(a.shape[:-1]))


def safe_div(num, den):
    """num / den, 0 where num is 0: the rules divide by eigenvalue (or singular value)
    differences that are 0 for repeated values; a zero cotangent there must stay 0, not
    become 0/0."""
    zero = aten.scalar_tensor.default(0.0, dtype=num.dtype, device=num.device)
    return aten.where.self(aten.eq.Scalar(num, 0), zero, aten.div.Tensor(num, den))


def pinv_backward(g, pinv, a):
    """torch's `pinv_backward`: the gradient of pinv(a) for cotangent g, in products of the
    smallest matrices."""
    m, n = a.shape[-2], a.shape[-1]
    pinv_h, g_h = mH(pinv), mH(g)
    if m <= n:
        k = matmul(g_h, pinv)
        k_pinv_h = matmul(k, pinv_h)
        terms = [
            aten.neg.default(mH(matmul(pinv, k))),
            k_pinv_h,
            aten.neg.default(matmul(matmul(a, pinv), k_pinv_h)),
            matmul(matmul(pinv_h, pinv), aten.sub.Tensor(g_h, matmul(k, a))),
        ]
    else:
        k = matmul(pinv, g_h)
        pinv_h_k = matmul(pinv_h, k)
        terms = [
            aten.neg.default(mH(matmul(k, pinv))),
            matmul(matmul(aten.sub.Tensor(g_h, matmul(a, k)), pinv), pinv_h),
            pinv_h_k,
            aten.neg.default(matmul(matmul(pinv_h_k, pinv), a)),
        ]
    out = terms[0]
    for t in terms[1:]:
        out = aten.add.Tensor(out, t)
    return out
