"""What the rule files share: small math helpers, and the makers of the rules that many ops
have in the same shape (one convention: a maker registers the rule of `op` into the RuleSet
it is given, passing `supports_complex` on, and names the rule after the op)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from thunderviz.autodiff.joint import get_grad, output_has_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import Symbol
from thunderviz.prims import aten
from thunderviz.prims.call_args import op_args


def scalar_zero(like):
    """A 0-dim zero with `like`'s dtype and device, for `where(cond, g, 0)`."""
    return aten.scalar_tensor.default(0.0, dtype=like.dtype, device=like.device)


def zeros_shaped(g, shape):
    """Zeros of `shape` with g's dtype and device (made in backward: nothing to save)."""
    return aten.new_zeros.default(g, list(shape))


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


def needs_grad_mask(*xs) -> list[bool]:
    """The `output_mask` of a backward kernel: which inputs need a gradient."""
    return [requires_grad(x) for x in xs]


def put_grads(inputs, grads) -> None:
    """`put_grad` for each input whose gradient a backward kernel computed (not None)."""
    for x, g in zip(inputs, grads, strict=True):
        if g is not None:
            put_grad(x, g)


# --- rule makers ----------------------------------------------------------------------------


def register(
    rules: RuleSet, op: Any, rule: Callable[..., Any], name: str = "", **options: Any
) -> None:
    """What every maker ends with: `rule` goes into `rules` for `op` (`options` as
    `RuleSet.grad` takes them), named after the op (or `name`) for tracebacks."""
    rule.__name__ = rule.__qualname__ = name or op.label
    rules.grad(op, **options)(rule)


def unary(
    rules: RuleSet,
    op: Symbol,
    grad: Callable[[Any, Any, Any], Any],
    *,
    holomorphic: bool = False,
    supports_complex: bool | None = None,
) -> None:
    """`out = op(a, *others)` whose gradient in `a` (its only differentiable input) is
    `grad(g, a, out)` for the output's cotangent g (JAX's `defjvp` in spirit: the math in one
    line, the machinery here). `holomorphic`: `grad` is g times an analytic f'(a), so for
    complex `a` torch's g * conj(f'(a)) is conj(grad(conj(g), a, out)); such a rule supports
    complex tensors."""

    def rule(a, *args, **kwargs):
        out = op(a, *args, **kwargs)
        g = get_grad(out)
        if holomorphic and a.dtype.is_complex:
            put_grad(a, conj(grad(conj(g), a, out)))
        else:
            put_grad(a, grad(g, a, out))
        return out

    register(rules, op, rule, supports_complex=True if holomorphic else supports_complex)


def pass_through(rules: RuleSet, op: Symbol, **options: Any) -> None:
    """Slope 1 in `a` (copies, casts, `a + 2`): the cotangent is the gradient (`put_grad`
    casts, moves and un-broadcasts it)."""
    unary(rules, op, lambda g, a, out: g, **options)


def zero_gradient(rules: RuleSet, op: Symbol, **options: Any) -> None:
    """Flat almost everywhere (`sign`, `floor`): autograd gives zeros, not none."""
    unary(rules, op, lambda g, a, out: zeros_of(a), **options)


def reshape_back(rules: RuleSet, op: Symbol, **options: Any) -> None:
    """Views and reshapes that keep the elements in order: the cotangent takes `a`'s shape."""
    unary(rules, op, lambda g, a, out: aten.reshape.default(g, list(a.shape)), **options)


def self_adjoint(rules: RuleSet, op: Symbol, **options: Any) -> None:
    """A linear map that is its own adjoint (transpose, flip, tril, conj): the gradient is
    the op applied to the cotangent, with the call's other arguments."""
    backward_kernel(rules, op, op, lambda g, x, *rest: (g, *rest), **options)


def with_arguments(
    rules: RuleSet, op: Symbol, put_grads_of: Callable[..., None], **options: Any
) -> None:
    """`result = op(*args, **kwargs)`, the call as recorded, whose gradients
    `put_grads_of(result, *every argument of the call, defaults filled in)` puts."""

    def rule(*args, **kwargs):
        result = op(*args, **kwargs)
        put_grads_of(result, *op_args(op, args, kwargs))
        return result

    register(rules, op, rule, **options)


def _g_x_rest(g, x, *rest):
    return (g, x, *rest)


def backward_kernel(
    rules: RuleSet,
    op: Symbol,
    backward: Symbol,
    kernel_args: Callable[..., tuple[Any, ...]] = _g_x_rest,
    constant_extras: bool = False,
    **options: Any,
) -> None:
    """`out = op(x, *rest)` (or `out, *extra = op(...)`) whose gradient in `x` is eager's own
    backward kernel, `backward(*kernel_args(g, x, *rest, *extra))` with every argument of the
    call spelled out (`op_args`); by default `backward(g, x, *rest, *extra)`.
    `constant_extras`: the extra outputs do not change with `x` (the slopes a random draw
    gave, a count of targets), so a gradient reaching them (a gradient of the kernel's
    gradient, which reads them) goes nowhere, as in eager."""

    def put_kernel_grad(result, x, *rest):
        out, *extra = result if isinstance(result, tuple) else (result,)
        if constant_extras:
            for i, e in enumerate(extra, start=1):
                if isinstance(e, TensorProxy) and output_has_grad(i):
                    get_grad(e)  # taken, and dropped: see above
        put_grad(x, backward(*kernel_args(get_grad(out), x, *rest, *extra)))

    with_arguments(rules, op, put_kernel_grad, **options)
