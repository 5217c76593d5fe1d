"""Grad rules for the backward kernels that other rules emit: a gradient of a gradient (a
penalty on an input gradient taken inside a traced program with create_graph=True,
`autodiff/inner_grad.py`), as torch's derivatives.yaml gives them.

Most backward kernels have a decomposition in torch's tables, whose ops rules differentiate
(capture records it while such a backward runs); these have none. Each is linear in the
incoming gradient `g`, `B(g, x) = J_f(x)^T g` for the forward op `f`, so the cotangent `c` of
its output reaches `g` as `J_f(x) c`: `f(c)` itself where `f` is linear in its input
(average pooling, padding), `c` read at the argmax indices for max pooling, the same mask
for the shrinks. None depends on `x` but through what is constant almost everywhere (the
indices, the mask), so `x` gets nothing, as in eager; convolution's is bilinear and is
the one exception.
"""

from __future__ import annotations

import functools

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

RULES = RuleSet("second_order")


@RULES.grad(aten.convolution_backward.default)
def convolution_backward(g_out, x, weight, bias_sizes, *rest):
    """The convolution's gradients differentiated again (a gradient penalty through a conv
    net), as torch's `_convolution_double_backward`. With `conv(a, w)` the forward op, each
    gradient is linear in `g_out` and in one of `x` and `weight`: `gx = conv_x^T(weight) g_out`,
    `gw = conv_w^T(x) g_out`, `gb = sum(g_out)`. So with cotangents `cx, cw, cb` of those:
    `g_out` gets `conv(cx, weight) + conv(x, cw) + cb`; `x` gets the input-gradient of
    `conv(., cw)` at `g_out`; `weight` the weight-gradient of `conv(cx, .)` at `g_out`."""
    *conv_args, output_mask = rest  # stride ... groups, as the forward took them
    outs = aten.convolution_backward.default(g_out, x, weight, bias_sizes, *rest)
    cx, cw, cb = (None if o is None else get_grad(o) for o in outs)
    if requires_grad(g_out):
        terms = []
        if cx is not None:
            terms.append(aten.convolution.default(cx, weight, None, *conv_args))
        if cw is not None:
            terms.append(aten.convolution.default(x, cw, cb, *conv_args))
        elif cb is not None:
            shape = [1, bias_sizes[0]] + [1] * (len(g_out.shape) - 2)
            terms.append(aten.expand.default(aten.view.default(cb, shape), list(g_out.shape)))
        if terms:
            put_grad(g_out, functools.reduce(aten.add.Tensor, terms))
    if requires_grad(x) and cw is not None:
        mask = [True, False, False]
        put_grad(x, aten.convolution_backward.default(g_out, x, cw, None, *conv_args, mask)[0])
    if requires_grad(weight) and cx is not None:
        mask = [False, True, False]
        put_grad(
            weight, aten.convolution_backward.default(g_out, cx, weight, None, *conv_args, mask)[1]
        )
    return outs


def _linear_in_grad(backward, forward_of_cotangent) -> None:
    """Register `backward(g, ...)`'s rule: `g` gets `forward_of_cotangent(c, g, *args)`."""

    def rule(g, *args):
        out = backward(g, *args)
        c = get_grad(out)  # (asked for even if g needs none: vjp._check_cotangents_read)
        if requires_grad(g):
            put_grad(g, forward_of_cotangent(c, g, *args))
        return out

    rule.__name__ = str(backward)
    RULES.grad(backward)(rule)


for _n in (2, 3):
    _pool = getattr(aten, f"avg_pool{_n}d").default
    _linear_in_grad(
        getattr(aten, f"avg_pool{_n}d_backward").default,
        lambda c, g, x, *pooling, _pool=_pool: _pool(c, *pooling),
    )
    _adaptive = getattr(aten, f"_adaptive_avg_pool{_n}d").default
    _linear_in_grad(
        getattr(aten, f"_adaptive_avg_pool{_n}d_backward").default,
        lambda c, g, x, _adaptive=_adaptive, _n=_n: _adaptive(c, list(g.shape[-_n:])),
    )
for _n in (1, 2, 3):
    _pad = getattr(aten, f"replication_pad{_n}d").default
    _linear_in_grad(
        getattr(aten, f"replication_pad{_n}d_backward").default,
        lambda c, g, x, padding, _pad=_pad: _pad(c, padding),
    )
for _name in ("hardshrink_backward", "softshrink_backward"):
    _kernel = getattr(aten, _name).default
    _linear_in_grad(_kernel, lambda c, g, x, lambd, _kernel=_kernel: _kernel(c, x, lambd))


def _at_indices(c, indices, spatial: int):
    """`c` (shaped like the pooled input) read where the pooling took each maximum."""
    flat_c = aten.flatten.using_ints(c, -spatial, -1)
    flat_i = aten.flatten.using_ints(indices, -spatial, -1)
    return aten.view.default(aten.gather.default(flat_c, -1, flat_i), list(indices.shape))


_linear_in_grad(
    aten.max_pool3d_with_indices_backward.default,
    lambda c, g, x, kernel, stride, padding, dilation, ceil_mode, indices: _at_indices(
        c, indices, 3
    ),
)
for _n in (2, 3):
    _linear_in_grad(
        getattr(aten, f"adaptive_max_pool{_n}d_backward").default,
        lambda c, g, x, indices, _n=_n: _at_indices(c, indices, _n),
    )
    _linear_in_grad(
        getattr(aten, f"fractional_max_pool{_n}d_backward").default,
        lambda c, g, x, kernel, output_size, indices, _n=_n: _at_indices(c, indices, _n),
    )
