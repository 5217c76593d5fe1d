"""Grad rules for the ops that take complex numbers apart or build them: abs, sgn, angle,
polar, complex (real, imag, conj and view_as_real/complex sit with the FFT rules).

torch's convention for a real loss L of a complex z = x + iy: the gradient of z is
dL/dx + i dL/dy (the conjugate Wirtinger derivative, times 2). A real input of a complex
result gets the real part (`put_grad` does it), as torch's `handle_r_to_c`. Each rule is
torch's derivatives.yaml formula (`sgn_backward`, `angle_backward`, `polar_backward`).
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import conj, scalar_zero, unary, zero_where, zeros_of
from thunderviz.prims import aten

RULES = RuleSet("complex_numbers", supports_complex=True)


def _times_i(z):
    """i * z for a complex tensor, without a complex constant in the trace:
    i (x + iy) = -y + ix."""
    return aten.complex.default(aten.neg.default(aten.imag.default(z)), aten.real.default(z))


# d|a| = sgn(a) (a / |a| for complex a; sign(a) for real a, 0 at 0 both ways)
unary(RULES, aten.abs.default, lambda g, a, out: aten.mul.Tensor(g, aten.sgn.default(a)))


@RULES.grad(aten.sgn.default)
def sgn(a):
    """Real a: flat almost everywhere, a zero gradient. Complex a: sgn(a) = a / |a| moves
    only along the circle: (g - sgn² conj(g)) / (2|a|), 0 where a == 0 (sgn_backward)."""
    out = aten.sgn.default(a)
    g = get_grad(out)
    if not a.dtype.is_complex:
        put_grad(a, zeros_of(a))
        return out
    magnitude = aten.abs.default(a)
    along = aten.sub.Tensor(g, aten.mul.Tensor(aten.mul.Tensor(out, out), conj(g)))
    grad = aten.div.Tensor(along, aten.mul.Tensor(magnitude, 2))
    put_grad(a, zero_where(aten.eq.Scalar(magnitude, 0), grad))
    return out


@RULES.grad(aten.angle.default)
def angle(a):
    """Real a: the angle is 0 or pi, constant, a zero gradient. Complex a: the angle
    turns with i a / |a|², 0 where a == 0 (angle_backward)."""
    out = aten.angle.default(a)
    g = get_grad(out)
    if not a.dtype.is_complex:
        put_grad(a, aten.mul.Tensor(g, scalar_zero(g)))
        return out
    squared = aten.real.default(aten.mul.Tensor(a, conj(a)))
    grad = aten.div.Tensor(aten.mul.Tensor(_times_i(a), g), squared)
    put_grad(a, zero_where(aten.eq.Scalar(squared, 0), grad))
    return out


@RULES.grad(aten.complex.default)
def complex_(real, imag):
    """real + i imag: each part takes its part of the cotangent."""
    out = aten.complex.default(real, imag)
    g = get_grad(out)
    put_grad(real, aten.real.default(g))
    put_grad(imag, aten.imag.default(g))
    return out


@RULES.grad(aten.polar.default)
def polar(magnitude, angle):
    """out = |r| e^{i angle}: d/dr = Re(conj(g) sgn(out)), d/dangle = Re(conj(g) i out)
    (polar_backward)."""
    out = aten.polar.default(magnitude, angle)
    g_conj = conj(get_grad(out))
    put_grad(magnitude, aten.real.default(aten.mul.Tensor(g_conj, aten.sgn.default(out))))
    put_grad(angle, aten.real.default(aten.mul.Tensor(g_conj, _times_i(out))))
    return out
