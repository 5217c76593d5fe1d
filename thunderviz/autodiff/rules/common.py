"""Small math helpers the rule files share (math only: no machinery)."""

from __future__ import annotations

import math

from thunderviz.prims import aten


def scalar_zero(like):
    """A 0-dim zero with `like`'s dtype and device, for `where(cond, g, 0)`."""
    return aten.scalar_tensor.default(0.0, dtype=like.dtype, device=like.device)


def zeros_of(x):
    """A zero gradient for input `x` (autograd's `zeros_like(grad)` for flat functions)."""
    return aten.full.default(list(x.shape), 0.0, dtype=x.dtype, device=x.device)


def one_minus(x):
    """1 - x, with Core ATen ops only."""
    return aten.add.Tensor(aten.neg.default(x), 1)


def conj(x):
    """The complex conjugate of a tensor or Python number; real values pass unchanged.
    torch's complex gradients multiply the cotangent by the conjugate of the derivative."""
    if isinstance(x, complex):
        return x.conjugate()
    if getattr(x, "dtype", None) is not None and x.dtype.is_complex:
        return aten.conj_physical.default(x)
    return x


def scaled(g, c):
    """g * c for a Python number c, skipping the multiply when c is 1."""
    return g if c == 1 else aten.mul.Tensor(g, c)


def log_of_number(base):
    """log(base) for a Python number, as IEEE math has it: -inf at 0, nan below."""
    if base > 0:
        return math.log(base)
    return -math.inf if base == 0 else math.nan


def zero_where(cond, x):
    """x with zeros where `cond` holds (a gradient that does not flow there)."""
    return aten.where.self(cond, scalar_zero(x), x)


def only_where(cond, x):
    """x where `cond` holds, zeros elsewhere."""
    return aten.where.self(cond, x, scalar_zero(x))
