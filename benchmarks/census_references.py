"""What the censuses compare thunderviz with: torch.autograd's gradients, and the two
arbiters for a gradient where the two differ (torch.autograd has bugs too, and float32 has
rounding). `settle` asks them in turn."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

# float32 gradients are sums of products computed in another order than autograd's
TOLERANCES = {
    torch.float64: (1e-6, 1e-8),
    torch.float32: (1e-3, 1e-4),
    torch.complex128: (1e-6, 1e-8),
}


def autograd(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], cts: list[Any]
) -> tuple[Any, list[Any]]:
    """torch.autograd: outputs and d<out, ct>/d(each floating leaf of args)."""
    leaves, spec = pytree.tree_flatten(args)
    leaves = [
        x.detach().requires_grad_(True)
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())
        else x
        for x in leaves
    ]
    inputs = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
    torch.manual_seed(0)
    out = fn(*pytree.tree_unflatten(leaves, spec), **kwargs)
    outs, out_cts = [], []
    for o, ct in zip(pytree.tree_leaves(out), cts, strict=True):
        if isinstance(o, torch.Tensor) and o.requires_grad:
            outs.append(o)
            out_cts.append(ct)
    grads = (
        torch.autograd.grad(outs, inputs, out_cts, allow_unused=True)
        if outs
        else [None] * len(inputs)
    )
    return out, list(grads)


def compare(expected: Any, got: Any, dtype: torch.dtype, what: str) -> str:
    """'' when `got` is `expected` within `dtype`'s tolerance, else what differs."""
    rtol, atol = TOLERANCES[dtype]
    if expected is None:
        if got is not None and torch.count_nonzero(got):
            return f"{what}: autograd has no gradient, thunderviz has one"
        return ""
    if got is None:
        return "" if not torch.count_nonzero(expected) else f"{what}: thunderviz has no gradient"
    try:
        torch.testing.assert_close(
            got, expected.detach(), rtol=rtol, atol=atol, equal_nan=True, check_dtype=False
        )
    except AssertionError as e:
        lines = [line for line in str(e).splitlines() if "difference" in line]
        return f"{what}: {lines[0].strip() if lines else str(e).splitlines()[0]}"
    return ""


def settle(
    fn: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    cts: list[Any],
    which: int,
    ours: torch.Tensor | None,
    theirs: torch.Tensor | None,
    dtype: torch.dtype,
) -> str | None:
    """Where thunderviz's gradient of floating input `which` (`ours`) and torch.autograd's
    (`theirs`) differ beyond the tolerance: why thunderviz's stands, or None if it does not.

    * float32: torch.autograd's gradient in float64 on the same values is the truth up to
      rounding, and thunderviz's may be as far from it as torch's own float32 is (twice,
      elementwise as a whole: the largest error), not further. A sum of large terms that
      nearly cancel (a second derivative through bicubic weights) is off by more than the
      tolerance in either, by the same few ulps of its terms.
    * finite differences in float64, where they side with thunderviz and not with torch."""
    if ours is None or theirs is None:
        return None
    if dtype == torch.float32:
        error = _float32_error(fn, args, kwargs, cts, which, ours, theirs)
        if error is not None:
            return error
    fd = finite_difference_vjp(fn, args, kwargs, cts, which)
    if (
        fd is None
        or compare(fd, ours.to(fd.dtype), dtype, "")
        or not compare(fd, theirs.to(fd.dtype), dtype, "")
    ):
        return None
    return "torch.autograd disagrees with finite differences, thunderviz agrees"


def _float32_error(
    fn: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    cts: list[Any],
    which: int,
    ours: torch.Tensor,
    theirs: torch.Tensor,
) -> str | None:
    """Why a float32 gradient stands, against torch.autograd's in float64 (`settle`)."""
    widen = lambda x: x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x  # noqa: E731
    try:
        _, grads = autograd(fn, *pytree.tree_map(widen, (args, kwargs, cts)))
    except Exception:  # noqa: BLE001 - the op has no float64 kernel: no truth to ask
        return None
    truth = grads[which]
    if truth is None:
        return None
    our_error = (ours.double() - truth).abs().max().item()
    their_error = (theirs.double() - truth).abs().max().item()
    if not our_error <= 2 * their_error:
        return None
    return (
        f"float32 rounding: {our_error:.3g} from torch.autograd in float64, where torch's "
        f"float32 is {their_error:.3g} from it"
    )


FD_MAX_ELEMENTS = 256  # central differences cost two calls per element


def finite_difference_vjp(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], cts: list[Any], which: int
) -> torch.Tensor | None:
    """<d out / d (floating or complex input `which`), cts> by central differences in double
    precision; None where that is not possible (non-float outputs, too many elements).

    For complex values the number differentiated is L = Σ Re(conj(ct)·out), and a complex
    input's gradient is dL/dRe + i·dL/dIm, each part from its own differences: torch's
    convention (for out = z·w it gives ct·conj(w))."""
    leaves, spec = pytree.tree_flatten(args)
    floats = [
        k
        for k, x in enumerate(leaves)
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())
    ]
    if leaves[floats[which]].numel() > FD_MAX_ELEMENTS:
        return None
    leaves = [
        (x.detach().cdouble() if x.is_complex() else x.detach().double()) if k in floats else x
        for k, x in enumerate(leaves)
    ]
    k = floats[which]
    base = leaves[k]

    def value(x: torch.Tensor) -> torch.Tensor:
        trial = list(leaves)
        trial[k] = x
        with torch.no_grad():
            torch.manual_seed(0)
            outs = pytree.tree_leaves(fn(*pytree.tree_unflatten(trial, spec), **kwargs))
        total = torch.zeros((), dtype=torch.float64)
        for o, ct in zip(outs, cts, strict=True):
            if ct is not None:
                if o.is_complex() or ct.is_complex():
                    product = torch.conj(ct.to(torch.complex128)) * o.to(torch.complex128)
                    total = total + product.real.sum()
                else:
                    total = total + (o.double() * ct.double()).sum()
        return total

    def central(direction: torch.Tensor) -> torch.Tensor:
        return (
            value(flat.add(direction).view_as(base)) - value(flat.sub(direction).view_as(base))
        ) / (2 * eps)

    eps = 1e-6
    grad = torch.zeros_like(base).reshape(-1)
    flat = base.reshape(-1)
    try:
        for j in range(flat.numel()):
            step = torch.zeros_like(flat)
            step[j] = eps
            grad[j] = central(step)
            if base.is_complex():  # the imaginary part's own differences
                grad[j] = grad[j] + 1j * central(step * 1j)
    except Exception:  # noqa: BLE001 - no arbiter for this sample
        return None
    return grad.view_as(base)
