"""grid_sample differentiated twice: a gradient of `F.grid_sample` taken inside a traced
program with create_graph=True, differentiated again (torch does it through
`GridSampler2DBackwardBackward0`; thunderviz refused it until its backward kernels had a
decomposition, `capture/grid_sampler_backward.py`).

References: the kernels themselves for the decomposition's values, and eager's
`torch.autograd` in float64 for the second derivatives, on grids that sample inside the
input, outside it, and exactly on its edges (an identity `affine_grid` with
align_corners=True lands on them: where the kernel's slope of a clipped coordinate is 0)."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import thunderviz as tv
from thunderviz.capture.grid_sampler_backward import grid_sampler_backward

D = torch.float64
MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}
CASES = [
    (spatial, mode)
    for spatial, mode in itertools.product((2, 3), MODES)
    if not (spatial == 3 and mode == "bicubic")  # torch has no 3-d bicubic
]


def _grid(n: int, out_sizes: tuple[int, ...], seed: int) -> torch.Tensor:
    """Points inside, outside and on the edges: an identity affine grid's (which meets ±1
    exactly), then random ones in [-1.6, 1.6]."""
    gen = torch.Generator().manual_seed(seed)
    spatial = len(out_sizes)
    theta = torch.eye(spatial, spatial + 1, dtype=D).expand(n, -1, -1)
    edges = F.affine_grid(theta, [n, 1, *out_sizes], align_corners=True)
    scattered = torch.rand(edges.shape, generator=gen, dtype=D) * 3.2 - 1.6
    return torch.cat([edges, scattered], dim=1)


def _inputs(spatial: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    in_sizes = (5, 4, 6)[-spatial:]
    x = torch.randn(2, 3, *in_sizes, generator=gen, dtype=D)
    return x, _grid(2, (3, 4, 2)[-spatial:], seed)


@pytest.mark.parametrize("spatial,mode", CASES)
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align_corners", [False, True])
def test_the_decomposition_gives_the_kernels_gradients(spatial, mode, padding, align_corners):
    whole, grid = _inputs(spatial)
    for x in (whole, whole[:, :, :1]):  # and a dim of size 1 (reflection over one point)
        options = (MODES[mode], PADDINGS[padding], align_corners)
        forward, backward = (
            (torch.ops.aten.grid_sampler_2d, torch.ops.aten.grid_sampler_2d_backward)
            if spatial == 2
            else (torch.ops.aten.grid_sampler_3d, torch.ops.aten.grid_sampler_3d_backward)
        )
        g = torch.randn_like(forward(x, grid, *options))
        for mask in ([True, True], [False, True]):
            want = backward(g, x, grid, *options, mask)
            got = grid_sampler_backward(g, x, grid, *options, mask)
            for w, o in zip(want, got, strict=True):
                assert (w is None) == (o is None)
                if w is not None:
                    torch.testing.assert_close(o, w, rtol=1e-12, atol=1e-12)


def _sampled(x, grid, mode):
    """Every padding mode and both alignments, weighted apart so that none hides another."""
    total = 0
    for k, (padding, align) in enumerate(itertools.product(PADDINGS, (False, True))):
        out = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
        total = total + (k + 1) * out.sin().sum()
    return total


def _penalty_inside(x, grid, mode):
    gx, ggrid = torch.autograd.grad(_sampled(x, grid, mode), [x, grid], create_graph=True)
    return (gx**2).sum() + (ggrid**2).sum() + (gx * x).sum()


@pytest.mark.parametrize("spatial,mode", CASES)
@pytest.mark.parametrize("inside", [True, False], ids=["inside the call", "outside it"])
def test_a_penalty_through_grid_sample_differentiates_again_as_in_eager(spatial, mode, inside):
    """Inside the call the second derivative is thunderviz's (the decomposition); outside it,
    torch's, through the jitted call's backward run with autograd on."""
    x, grid = _inputs(spatial, seed=1)

    def second_order(program):
        a, b = x.clone().requires_grad_(), grid.clone().requires_grad_()
        if inside:
            return torch.autograd.grad(program(a, b, mode), [a, b])
        ga, gb = torch.autograd.grad(program(a, b, mode), [a, b], create_graph=True)
        return torch.autograd.grad((ga**2).sum() + (gb**2).sum() + (ga * a).sum(), [a, b])

    program = _penalty_inside if inside else _sampled
    want = second_order(program)
    got = second_order(tv.jit(program))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
    assert any(w.abs().max() > 0 for w in want)
