"""grid_sample's backward kernels (`grid_sampler_2d_backward`, `grid_sampler_3d_backward`)
decomposed into ops that have grad rules. torch's tables have no decomposition of them, so
without this a gradient of `F.grid_sample` taken inside a traced program with
`create_graph=True` (a penalty on a spatial transformer's gradients, a smoothness term through
a warp) could not be differentiated again; eager does it (`GridSampler2DBackwardBackward0`).

The recorder keeps the kernel as the code and this as its subsymbols, which autodiff reads
(`capture/decompositions.py`): the values are still the kernel's, bit for bit; only their
derivatives come from here.

grid_sample reads, for each output point `p`, the input at a few integer taps around a source
position `c(p)` (one coordinate per spatial dim), weighted by a product of 1-d weights:

    out[n, ch, p] = sum over taps  prod_d w_{t_d}(c_d)  x[n, ch, tap]     (0 off the input)

so with `g` the output's gradient, the kernel's two gradients are

    gx[n, ch, q]    = sum of prod_d w_{t_d}(c_d) g[n, ch, p] over the (p, tap) that land on q
    ggrid[n, p, e]  = dc_e/dgrid_e  sum over taps  w'_{t_e}(c_e) prod_{d != e} w_{t_d}(c_d)
                                                   sum_ch g[n, ch, p] x[n, ch, tap]

The taps and the slope `dc/dgrid` are constant almost everywhere (where the coordinate is
clipped or reflected, the kernel's slope is 0 or -1), so they are computed from the grid
detached, and the coordinate carries its derivative as `value + slope * (grid - grid)`: the
value stays the detached one exactly, and its derivative is the kernel's slope even where a
clamp's own rule would differ (at the border, where the kernel says 0).

Conventions (interpolation, padding, align_corners, the cubic coefficients) are those of
ATen's `GridSampler.h`; `tests/autodiff/test_grid_sampler_second_order.py` checks this
decomposition's values against the kernels and its derivatives against eager's.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import torch

__all__ = ["DECOMPOSITIONS"]

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
_CUBIC_A = -0.75  # the cubic convolution's A, as in ATen (and PIL, OpenCV)


def grid_sampler_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    grid: torch.Tensor,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """`grid_sampler_{2,3}d_backward`: (the input's gradient, or None where `output_mask`
    asks for none, as the kernel; the grid's gradient, which the kernel always computes)."""
    n, channels, *in_sizes = x.shape
    spatial = len(in_sizes)
    points = math.prod(grid.shape[1:-1])
    flat_grid = grid.reshape(n, points, spatial)
    fixed = flat_grid.detach()
    # one (indices, in-bounds, weights, weight slopes, coordinate slope) per spatial dim of
    # x, in x's order: the grid's last component addresses x's last dim
    per_dim = [
        _taps(
            flat_grid[..., spatial - 1 - d],
            fixed[..., spatial - 1 - d],
            in_sizes[d],
            interpolation_mode,
            padding_mode,
            align_corners,
        )
        for d in range(spatial)
    ]
    index, inside, weight, weight_slopes = _combine(per_dim, in_sizes)
    taps = index.shape[1]  # (n, taps, points) each

    flat_x = x.reshape(n, channels, -1)
    at = index.reshape(n, 1, taps * points).expand(n, channels, taps * points)
    g = grad_out.reshape(n, channels, 1, points)
    grad_x = None
    if output_mask[0]:
        spread = (g * torch.where(inside, weight, 0).unsqueeze(1)).reshape(n, channels, -1)
        grad_x = torch.zeros_like(flat_x).scatter_add(2, at, spread).reshape(x.shape)

    if interpolation_mode == NEAREST:  # the weights are 1 wherever they are not 0
        return grad_x, torch.zeros_like(grid)
    values = flat_x.gather(2, at).reshape(n, channels, taps, points)
    read = torch.where(inside, (g * values).sum(1), 0)  # (n, taps, points)
    slopes = [
        (slope * read).sum(1) * coordinate_slope
        for slope, (*_, coordinate_slope) in zip(weight_slopes, per_dim, strict=True)
    ]
    # the grid's components are x's dims reversed
    return grad_x, torch.stack(slopes[::-1], -1).reshape(grid.shape)


def _taps(
    grid: torch.Tensor,
    fixed: torch.Tensor,
    size: int,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], Any]:
    """For one spatial dim of size `size`: each tap's index and whether it is on the input,
    its weight and the weight's derivative as to the source coordinate, and the coordinate's
    derivative as to the grid (a number or a tensor)."""
    scale = (size - 1) / 2 if align_corners else size / 2
    # (written as the kernel writes it: in float32 another order can round across a cell's
    # edge, and the taps would be those of the next cell)
    if align_corners:
        unnormalized = ((fixed + 1) / 2) * (size - 1)
    else:
        unnormalized = ((fixed + 1) * size - 1) / 2
    if interpolation_mode == BICUBIC:
        # the coordinate unpadded; the padding moves each of the four taps instead
        value, slope = unnormalized, scale
    else:
        value, padding_slope = _padded(unnormalized, size, padding_mode, align_corners)
        slope = scale if padding_slope is None else padding_slope * scale
    coordinate = value + slope * (grid - fixed)  # the value exactly; the kernel's slope

    if interpolation_mode == NEAREST:
        nearest = torch.round(value)  # half to even, as the kernel's nearbyint
        return ([nearest], [torch.ones_like(value)], [torch.zeros_like(value)], slope)
    floor = torch.floor(value)
    t = coordinate - floor
    if interpolation_mode == BILINEAR:
        return ([floor, floor + 1], [1 - t, t], [torch.full_like(t, -1), torch.ones_like(t)], slope)
    if interpolation_mode != BICUBIC:
        raise ValueError(f"grid_sampler: no interpolation mode {interpolation_mode}")
    positions = [_padded(floor + (i - 1), size, padding_mode, align_corners)[0] for i in range(4)]
    a = _CUBIC_A
    near = lambda s: ((a + 2) * s - (a + 3)) * s * s + 1  # noqa: E731 - |s| <= 1
    far = lambda s: ((a * s - 5 * a) * s + 8 * a) * s - 4 * a  # noqa: E731 - 1 < |s| < 2
    near_slope = lambda s: (3 * (a + 2) * s - 2 * (a + 3)) * s  # noqa: E731
    far_slope = lambda s: (3 * a * s - 10 * a) * s + 8 * a  # noqa: E731
    weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    # (d/dt of each: the inner derivative of 1 - t and 2 - t is -1)
    slopes = [far_slope(t + 1), near_slope(t), -near_slope(1 - t), -far_slope(2 - t)]
    return positions, weights, slopes, slope


def _padded(
    coordinate: torch.Tensor, size: int, padding_mode: int, align_corners: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The source coordinate after the padding mode, and its derivative (None for 1)."""
    if padding_mode == ZEROS:
        return coordinate, None
    if padding_mode == REFLECTION:
        if align_corners:
            coordinate, sign = _reflected(coordinate, 0, 2 * (size - 1))
        else:
            coordinate, sign = _reflected(coordinate, -1, 2 * size - 1)
    elif padding_mode == BORDER:
        sign = None
    else:
        raise ValueError(f"grid_sampler: no padding mode {padding_mode}")
    # clipped to [0, size - 1]; the kernel's slope is 0 on the ends themselves
    inside = (coordinate > 0) & (coordinate < size - 1)
    clipped = coordinate.clamp(0, size - 1)
    slope = torch.where(inside, 1.0 if sign is None else sign, 0.0).to(coordinate.dtype)
    return clipped, slope


def _reflected(
    coordinate: torch.Tensor, twice_low: int, twice_high: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The coordinate reflected into [twice_low / 2, twice_high / 2], and the sign of its
    slope (0 where the range is a single point)."""
    if twice_low == twice_high:
        return torch.zeros_like(coordinate), torch.zeros_like(coordinate)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    shifted = coordinate - low
    flipped_in = shifted < 0
    distance = shifted.abs()
    extra = torch.fmod(distance, span)
    even = torch.remainder(torch.floor(distance / span), 2) == 0
    reflected = torch.where(even, extra + low, span - extra + low)
    sign = torch.where(flipped_in, -1.0, 1.0) * torch.where(even, 1.0, -1.0)
    return reflected, sign.to(coordinate.dtype)


def _combine(
    per_dim: list[tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], Any]],
    in_sizes: list[int],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Every tap of the product grid (2 x 2 for bilinear, 4 x 4 for bicubic, ...): its flat
    index into the input's spatial dims, whether it is on the input, its weight, and the
    weight's derivative as to each dim's coordinate, each shaped (n, taps, points)."""
    strides = [math.prod(in_sizes[d + 1 :]) for d in range(len(in_sizes))]
    index, inside, weight = [], [], []
    weight_slopes: list[list[torch.Tensor]] = [[] for _ in per_dim]
    for combo in itertools.product(*(range(len(dim[0])) for dim in per_dim)):
        flat, on = None, None
        for (positions, *_), size, stride, i in zip(per_dim, in_sizes, strides, combo, strict=True):
            where = positions[i]
            on_dim = (where >= 0) & (where <= size - 1)
            term = where.clamp(0, size - 1).to(torch.long) * stride
            flat = term if flat is None else flat + term
            on = on_dim if on is None else on & on_dim
        index.append(flat)
        inside.append(on)
        factors = [dim[1][i] for dim, i in zip(per_dim, combo, strict=True)]
        weight.append(functools.reduce(torch.mul, factors))
        for e, (dim, i) in enumerate(zip(per_dim, combo, strict=True)):
            others = [f for d, f in enumerate(factors) if d != e]
            weight_slopes[e].append(functools.reduce(torch.mul, others, dim[2][i]))
    stack = lambda parts: torch.stack(parts, 1)  # noqa: E731
    return stack(index), stack(inside), stack(weight), [stack(s) for s in weight_slopes]


DECOMPOSITIONS = {
    torch.ops.aten.grid_sampler_2d_backward.default: grid_sampler_backward,
    torch.ops.aten.grid_sampler_3d_backward.default: grid_sampler_backward,
}
