"""What the recorder needs to make mutation functional: in-place -> functional variants, and
how to write a view's new value back into its base (which ops write and which are views:
`prims/aliasing.py`)."""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["functional_variant", "scatter_into_base"]

aten = torch.ops.aten
_OpOverload = torch._ops.OpOverload


def _arg_key(arg: Any) -> tuple[str, str]:
    # Types printed without alias annotations: `Tensor(a!) self` and `Tensor self` match.
    return arg.name, str(arg.type)


@functools.cache
def functional_variant(op: _OpOverload) -> tuple[_OpOverload, bool] | None:
    """(functional op, returns_new_values_of_mutated_args) for a mutating ATen op.

    `add_.Tensor` -> (`add.Tensor`, False): its output is the new value of `self`; likewise
    `div.out` -> (`div.Tensor`, False), the new value of `out` (an op with one `out=`).
    `_native_batch_norm_legit.default` -> (`_native_batch_norm_legit_functional.default`, True):
    torchgen's `*_functional` ops return the normal outputs followed by the new values of
    each mutated argument.
    """
    name = op._schema.name.split("::", 1)[1]
    outs = [a for a in op._schema.arguments if a.is_out]
    if outs:  # `div.out(self, other, *, out)`: `div.Tensor(self, other)`, whose result is out's
        if len(outs) != 1:
            return None
        keys = [_arg_key(a) for a in op._schema.arguments if not a.is_out]
        return _same_arguments(getattr(aten, name, None), op, keys, False)
    keys = [_arg_key(a) for a in op._schema.arguments]
    candidates: list[tuple[str, bool]] = [(f"{name}_functional", True)]
    if name.endswith("_"):
        candidates.append((name[:-1], False))
    candidates.append((name, False))
    for base, returns_mutated in candidates:
        found = _same_arguments(getattr(aten, base, None), op, keys, returns_mutated)
        if found is not None:
            return found
    return _SPECIAL.get(op)


def _same_arguments(
    packet: Any, op: _OpOverload, keys: list[tuple[str, str]], returns_mutated: bool
) -> tuple[_OpOverload, bool] | None:
    """The overload of `packet` that mutates nothing and takes exactly `keys`."""
    if packet is None:
        return None
    for overload in packet.overloads():
        cand = getattr(packet, overload)
        if cand is op or cand._schema.is_mutable:
            continue
        if [_arg_key(a) for a in cand._schema.arguments] == keys:
            return cand, returns_mutated
    return None


# In-place ops whose functional twin takes other arguments.
_SPECIAL: dict[Any, tuple[_OpOverload, bool]] = {
    aten.bernoulli_.float: (aten.bernoulli.p, False),
    aten.normal_.default: (aten.normal_functional.default, False),
    aten.zero_.default: (aten.zeros_like.default, False),
    aten.native_batch_norm.default: (aten._native_batch_norm_legit_functional.default, True),
}


def scatter_into_base(
    view_op: _OpOverload,
    view_args: tuple[Any, ...],
    view_kwargs: dict[str, Any],
    output_index: int,
    base: Any,
    base_shape: tuple[int, ...],
    src: Any,
    view_meta: torch.Tensor,
) -> tuple[_OpOverload, tuple[Any, ...]]:
    """The ATen call that puts `src` (a new value of a view) back into `base`.

    `view_args` are the view op's arguments after its input; `view_meta` the view tensor
    itself (for its strides when only `as_strided_scatter` can express the write).
    """
    args = list(view_args)
    kw = dict(view_kwargs)
    if view_op is aten.select.int:
        dim, index = args[0], args[1]
        return aten.select_scatter.default, (base, src, dim, index)
    if view_op is aten.slice.Tensor:
        dim = args[0] if len(args) > 0 else kw.get("dim", 0)
        start = args[1] if len(args) > 1 else kw.get("start")
        end = args[2] if len(args) > 2 else kw.get("end")
        step = args[3] if len(args) > 3 else kw.get("step", 1)
        return aten.slice_scatter.default, (base, src, dim, start, end, step)
    if view_op is aten.diagonal.default:
        return aten.diagonal_scatter.default, (base, src, *args)
    if view_op in (aten.t.default, aten.transpose.int):
        if len(base_shape) < 2:
            return aten.view.default, (src, list(base_shape))
        d0, d1 = (0, 1) if view_op is aten.t.default else (args[0], args[1])
        perm = list(range(len(base_shape)))
        perm[d0], perm[d1] = perm[d1], perm[d0]  # a transpose is its own inverse
        return aten.permute.default, (src, perm)
    if view_op is aten.permute.default:
        dims = list(args[0])
        inverse = [0] * len(dims)
        for i, d in enumerate(dims):
            inverse[d % len(dims)] = i
        return aten.permute.default, (src, inverse)
    if view_op is aten.unbind.int:
        dim = args[0] if args else kw.get("dim", 0)
        return aten.select_scatter.default, (base, src, dim, output_index)
    if view_op in _SHAPE_ONLY_VIEWS:
        return aten.view.default, (src, list(base_shape))
    return aten.as_strided_scatter.default, (
        base,
        src,
        list(view_meta.shape),
        list(view_meta.stride()),
        view_meta.storage_offset(),
    )


# Views that change only the shape: writing back is a view to the base's shape.
_SHAPE_ONLY_VIEWS = {
    aten.view.default,
    aten._unsafe_view.default,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.alias.default,
    aten.detach.default,
    aten._reshape_alias.default,
    aten.reshape.default,
    aten.flatten.using_ints,
    aten.view_as.default,
}
