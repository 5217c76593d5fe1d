"""Undoing broadcasting and promotion on gradients (`sum_to`, `match_input`)."""

from __future__ import annotations

from thunderviz.core.proxies import TensorProxy
from thunderviz.prims import aten

__all__ = ["sum_to", "match_input"]


def sum_to(g: TensorProxy, shape: tuple[int, ...]) -> TensorProxy:
    """Sum `g` down to `shape`, undoing the broadcast that made it bigger."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    kept = [lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1]
    if not kept:  # only leading dims were broadcast (a bias): one sum, no reshape
        return aten.sum.dim_IntList(g, list(range(lead)))
    g = aten.sum.dim_IntList(g, list(range(lead)) + kept, keepdim=True)
    if tuple(g.shape) != shape:
        g = aten.view.default(g, list(shape))
    return g


def match_input(x: TensorProxy, g: TensorProxy) -> TensorProxy:
    """The gradient of `x` from `g`: same shape (un-broadcast), dtype and device as `x`.

    Covers 0-dim CPU tensors mixed with CUDA tensors (their gradient goes back to the CPU)
    and type promotion (an f32 input used in an f64 op gets an f32 gradient); a real input
    whose gradient came out complex gets its real part, as torch's `handle_r_to_c`.
    """
    g = sum_to(g, x.shape)
    if g.dtype.is_complex and not x.dtype.is_complex:
        g = aten.real.default(g)  # a real input of a complex result (torch's handle_r_to_c)
    if g.dtype != x.dtype or g.device != x.device:
        g = aten._to_copy.default(g, dtype=x.dtype, device=x.device)
    return g
