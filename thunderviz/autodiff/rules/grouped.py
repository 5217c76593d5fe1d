"""The grad rule of `aten._grouped_mm` (`F.grouped_mm`: mixture-of-experts layers).

`_grouped_mm(a, b, offs)` multiplies groups of rows (or columns) by one matrix each; `offs`
holds the cumulative group ends along the dimension that is split. Each gradient is again
a grouped product, split at the same `offs`, so the backward never needs the group sizes
as Python numbers: its shapes are the inputs' shapes whatever the routing (tokens per
expert change from step to step without a retrace).

    a 2-D (M, K), b 3-D (G, K, N), rows of a split:   out (M, N)
        da = gmm(g, bᵀ, offs)  [2-D x 3-D]       db = gmm(aᵀ, g, offs)  [2-D x 2-D]
    a 2-D (M, K), b 2-D (K, N), K split:              out (G, M, N)
        da = gmm(g, bᵀ, offs)  [3-D x 2-D]       db = gmm(aᵀ, g, offs)  [2-D x 3-D]
    a 3-D (G, M, K), b 2-D (K, N), columns of b split: out (M, N)
        da = gmm(g, bᵀ, offs)  [2-D x 2-D]       db = gmm(aᵀ, g, offs)  [3-D x 2-D]
    a 3-D, b 3-D, no offs: a batched product        out (G, M, N)

(bᵀ, aᵀ: the last two dims swapped.) The op's meta kernel accepts only bfloat16 while its
CPU kernel also runs float32 and float16, so shapes come from the rule above, not from meta.
"""

from __future__ import annotations

import torch

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BoundSymbol, Symbol
from thunderviz.prims import aten
from thunderviz.prims.aten import aten_symbol, infer_device

RULES = RuleSet("grouped")

_GROUPED_MM = torch.ops.aten._grouped_mm.default


def _grouped_mm_shape(a: TensorProxy, b: TensorProxy, offs: TensorProxy | None) -> list[int]:
    if a.ndim == 2 and b.ndim == 3:
        return [a.shape[0], b.shape[2]]
    if a.ndim == 2 and b.ndim == 2:
        assert offs is not None  # groups along the shared dim: torch requires offs
        return [offs.shape[0], a.shape[0], b.shape[1]]
    if a.ndim == 3 and b.ndim == 2:
        return [a.shape[1], b.shape[1]]
    return [a.shape[0], a.shape[1], b.shape[2]]


def _grouped_mm_meta(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.device]:
    a, b, offs, _bias, out_dtype = _args(*args, **kwargs)
    out = torch.empty(_grouped_mm_shape(a, b, offs), dtype=out_dtype or a.dtype, device="meta")
    return out, infer_device(args, kwargs)


GROUPED_MM = Symbol(
    name=aten_symbol(_GROUPED_MM).name,
    id=aten_symbol(_GROUPED_MM).id,
    fn=_GROUPED_MM,
    meta=_grouped_mm_meta,
    label="_grouped_mm",
)


def _args(self, mat2, offs=None, bias=None, out_dtype=None):
    return self, mat2, offs, bias, out_dtype


def _mT(x):
    return aten.transpose.int(x, -2, -1)


def _no_bias(bsym: BoundSymbol) -> bool:
    """A bias that needs a gradient is not handled (no kernel computes it per group):
    such a call gets autodiff's error naming the op, the line and the module."""
    bias = _args(*bsym.args, **bsym.kwargs)[3]
    return not (isinstance(bias, TensorProxy) and bias.requires_grad)


@RULES.grad(_GROUPED_MM, applies=_no_bias)
def grouped_mm(*args, **kwargs):
    a, b, offs, _bias, _out_dtype = _args(*args, **kwargs)
    out = GROUPED_MM(*args, **kwargs)
    g = get_grad(out)
    assert g is not None  # out is a tensor
    if g.dtype != a.dtype:  # out_dtype: the products run in the inputs' dtype
        g = aten._to_copy.default(g, dtype=a.dtype)
    if requires_grad(a):
        put_grad(a, GROUPED_MM(g, _mT(b), offs))
    if requires_grad(b):
        put_grad(b, GROUPED_MM(_mT(a), g, offs))
    return out
