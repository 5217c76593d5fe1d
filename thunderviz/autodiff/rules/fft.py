"""Grad rules for the FFT kernels every `torch.fft` function runs (torch's
`fft_r2c_backward`, `fft_c2r_backward` and `_fft_c2c` formulas).

A DFT is linear: its gradient is the adjoint transform with the same normalization mode,
run the other way (c2c forward <-> backward). The one-sided real transforms add the
bookkeeping of the half spectrum: r2c's adjoint pads the missing half with zeros; c2r's
adjoint doubles the bins whose mirror images were left out of the one-sided input.
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import pass_through, self_adjoint, unary
from thunderviz.prims import aten

RULES = RuleSet("fft", supports_complex=True)


@RULES.grad(aten._fft_c2c.default)
def fft_c2c(x, dim, normalization, forward):
    out = aten._fft_c2c.default(x, dim, normalization, forward)
    put_grad(x, aten._fft_c2c.default(get_grad(out), dim, normalization, not forward))
    return out


@RULES.grad(aten._fft_r2c.default)
def fft_r2c(x, dim, normalization, onesided):
    out = aten._fft_r2c.default(x, dim, normalization, onesided)
    g = get_grad(out)
    assert g is not None  # out is a tensor
    if onesided:  # the bins left out (mirror images) get no cotangent
        last = dim[-1] % x.ndim
        missing = x.shape[last] - g.shape[last]
        if missing > 0:
            pad = [0, 0] * (g.ndim - 1 - last) + [0, missing]
            g = aten.constant_pad_nd.default(g, pad, 0)
    put_grad(x, aten.real.default(aten._fft_c2c.default(g, dim, normalization, False)))
    return out


@RULES.grad(aten._fft_c2r.default)
def fft_c2r(x, dim, normalization, last_dim_size):
    out = aten._fft_c2r.default(x, dim, normalization, last_dim_size)
    g = get_grad(out)
    assert g is not None  # out is a tensor
    gx = aten._fft_r2c.default(g, dim, normalization, True)
    last = dim[-1] % g.ndim
    doubled = g.shape[last] - gx.shape[last]  # bins 1..doubled stand for two each
    if doubled > 0:
        rest = gx.shape[last] - 1 - doubled
        weights = aten.cat.default(
            [
                aten.ones.default([1], dtype=g.dtype, device=g.device),
                aten.full.default([doubled], 2.0, dtype=g.dtype, device=g.device),
                aten.ones.default([rest], dtype=g.dtype, device=g.device),
            ]
        )
        gx = aten.mul.Tensor(gx, aten.view.default(weights, [-1] + [1] * (g.ndim - 1 - last)))
    put_grad(x, gx)
    return out


# conjugation is its own adjoint
for _op in (aten._conj.default, aten._conj_physical.default, aten.conj_physical.default):
    self_adjoint(RULES, _op)


# --- complex numbers as pairs of reals (around the transforms: stft, polar, complex) ----------


unary(
    RULES,
    aten.view_as_real.default,
    lambda g, x, out: aten.view_as_complex.default(aten.contiguous.default(g)),
)
unary(RULES, aten.view_as_complex.default, lambda g, x, out: aten.view_as_real.default(g))
# The cotangent g of Re(x) is the complex cotangent g + 0i of x; that of Im(x) is 0 + gi.
pass_through(RULES, aten.real.default)
unary(
    RULES,
    aten.imag.default,
    lambda g, x, out: aten.complex.default(aten.zeros_like.default(g), g),
)
