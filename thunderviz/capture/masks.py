"""Boolean-mask indexing recorded as integer positions.

`x[mask]`, `x[mask] = v` and `masked_select(x, mask)` select as many elements as the mask
has `True`s: a count only the mask's values tell. The grad rules build their code on meta
tensors, which have no values, so the recorder spells each such call out one level down,
in ops whose shapes follow from their inputs' shapes:

    x[mask]               ->  p = nonzero(mask); x[p[:, 0], p[:, 1], ...]
    x[mask] = v           ->  p = nonzero(mask); index_put(x, [p[:, 0], ...], v)
    masked_select(x, m)   ->  the same on x and m broadcast to one shape

The count this run saw is in the proxies' shapes (`nonzero`'s output is `[k, mask.ndim]`);
the call itself stays in the trace as it was made, with these as its subsymbols, and keeps
what marks it data-dependent for `jit`'s guards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BoundSymbol

__all__ = ["selects_by_mask", "mask_as_positions"]

aten = torch.ops.aten
_INDEXING = {
    aten.index.Tensor,
    aten._unsafe_index.Tensor,
    aten.index_put.default,
    aten._unsafe_index_put.default,
}
_MASKS = (torch.bool, torch.uint8)

# (op, args, kwargs, output) -> the bound symbol of that call, where and in which module it
# was made
MakeBsym = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], BoundSymbol]


def _is_mask(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in _MASKS


def selects_by_mask(func: Any, args: tuple[Any, ...]) -> bool:
    """An indexing call with a boolean (or uint8) mask among its indices, or masked_select.
    (A 0-dim mask adds a dimension rather than selecting; `x[torch.tensor(True)]` reaches
    ATen as integer positions already, and a direct call with one is left as it is.)"""
    if func is aten.masked_select.default:
        return True
    if func not in _INDEXING or len(args) < 2:
        return False
    masks = [i for i in args[1] if _is_mask(i)]
    return bool(masks) and all(m.ndim > 0 for m in masks)


class _Positions:
    """Records `nonzero(mask)` and its columns as bound symbols."""

    def __init__(self, make: MakeBsym, fresh: Callable[[], str]) -> None:
        self.make, self.fresh = make, fresh
        self.bsyms: list[BoundSymbol] = []

    def proxy(
        self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> TensorProxy:
        return TensorProxy(name=self.fresh(), shape=shape, dtype=dtype, device=device)

    def record(
        self, op: Any, args: tuple[Any, ...], output: Any, kwargs: dict[str, Any] | None = None
    ) -> Any:
        self.bsyms.append(self.make(op, args, kwargs or {}, output))
        return output

    def columns(self, mask: torch.Tensor, p_mask: TensorProxy) -> list[TensorProxy]:
        """`nonzero(mask)` split into one index vector per mask dimension."""
        count = int(torch.count_nonzero(mask))
        nz = self.record(
            aten.nonzero.default,
            (p_mask,),
            self.proxy((count, mask.ndim), torch.int64, p_mask.device),
        )
        return [
            self.record(
                aten.select.int, (nz, 1, d), self.proxy((count,), torch.int64, p_mask.device)
            )
            for d in range(mask.ndim)
        ]

    def indices(self, indices: Any, p_indices: Any) -> list[Any]:
        out: list[Any] = []
        for real, p in zip(indices, p_indices, strict=True):
            out.extend(self.columns(real, p) if _is_mask(real) else [p])
        return out

    def as_vector(self, p: TensorProxy) -> TensorProxy:
        """A 0-dim `p` viewed as 1 element."""
        return self.record(aten.view.default, (p, [1]), self.proxy((1,), p.dtype, p.device))

    def expanded(self, p: TensorProxy, shape: tuple[int, ...]) -> TensorProxy:
        if tuple(p.shape) == shape:
            return p
        return self.record(
            aten.expand.default, (p, list(shape)), self.proxy(shape, p.dtype, p.device)
        )


def mask_as_positions(
    func: Any,
    args: tuple[Any, ...],
    p_args: tuple[Any, ...],
    p_kwargs: dict[str, Any],
    output: Any,
    make: MakeBsym,
    fresh: Callable[[], str],
) -> list[BoundSymbol]:
    """The subsymbols of a `selects_by_mask` call: the same selection by integer positions,
    producing the call's own `output` proxy. `args` are the real tensors, `p_args` their
    proxies (the mask's values give the count; `nonzero` recomputes the positions)."""
    pos = _Positions(make, fresh)
    if func is aten.masked_select.default:
        x, mask = args[0], args[1]
        shape = tuple(torch.broadcast_shapes(x.shape, mask.shape))
        p_x, p_mask = pos.expanded(p_args[0], shape), pos.expanded(p_args[1], shape)
        mask = mask.expand(shape)
        if not shape:  # 0-dim: positions need a dimension to select along, so a 1-element one
            p_x, p_mask = (pos.as_vector(p) for p in (p_x, p_mask))
            mask = mask.reshape(1)
        pos.record(aten.index.Tensor, (p_x, pos.columns(mask, p_mask)), output)
        return pos.bsyms
    op = (
        aten.index_put.default
        if func in (aten.index_put.default, aten._unsafe_index_put.default)
        else aten.index.Tensor
    )
    pos.record(op, (p_args[0], pos.indices(args[1], p_args[1]), *p_args[2:]), output, p_kwargs)
    return pos.bsyms
