"""Output metadata for ATen ops torch gives no meta kernel.

A grad rule builds its forward and backward code on proxies, whose shapes come from running
each op on meta tensors (`aten.meta_outputs`). A few kernels have no meta implementation
(CTC loss's backward, 3-d fractional max pooling's, multilabel margin loss's; CTC loss
itself with its lengths given as tensors, packing a padded sequence), or one that reads
values a meta tensor does not have (unpacking a sequence's gradient reads its batch sizes),
and a rule that emits one could not be built. Two things stand in:

* the call being differentiated: a rule re-emits its op with the same arguments (to name its
  outputs), and those outputs are already known, as the trace recorded them
  (`differentiating`). This covers forward kernels whose output shapes depend on values
  (`_ctc_loss.Tensor`'s log-alpha is as long as the longest target).
* gradient kernels: each returns the gradient of one of its arguments, shaped and typed as
  that argument, or as a size it is given (`_GRADIENTS`); these never run a meta kernel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import torch

from thunderviz.core.proxies import NumberProxy, Proxy, TensorProxy, map_proxies

__all__ = ["SameCall", "differentiating", "gradient_kernel", "recorded_call"]

SameCall = Callable[[tuple[Any, ...], dict[str, Any]], bool]


def _like(position: int) -> Callable[[tuple[Any, ...]], Any]:
    """The gradient of the argument at `position`: its shape and dtype."""
    return lambda args: args[position].meta()


def _sized(size_at: int, dtype_of: int) -> Callable[[tuple[Any, ...]], Any]:
    """A gradient of the size given at `size_at`, of the dtype of the argument at `dtype_of`."""
    return lambda args: torch.empty(list(args[size_at]), dtype=args[dtype_of].dtype, device="meta")


_aten = torch.ops.aten
# Backward kernel -> its output's metadata, from its arguments (proxies)
_GRADIENTS: dict[Any, Callable[[tuple[Any, ...]], Any]] = {
    _aten._ctc_loss_backward.default: _like(1),  # (grad, log_probs, ...): d log_probs
    _aten._ctc_loss_backward.Tensor: _like(1),
    _aten.fractional_max_pool3d_backward.default: _like(1),  # (grad_output, self, ...)
    _aten.multilabel_margin_loss_backward.default: _like(1),  # (grad_output, self, ...)
    _aten._pack_padded_sequence_backward.default: _sized(1, 0),  # (grad, input_size, ...)
}


def gradient_kernel(op: Any, args: tuple[Any, ...]) -> Any:
    """The meta output of a gradient kernel in `_GRADIENTS`, or None for any other op."""
    shape_of = _GRADIENTS.get(op)
    return shape_of(args) if shape_of is not None else None


# The call whose grad rule is running in this thread, and how to tell a call is the same
# one (the VJP sets both: it owns comparing calls)
_current: ContextVar[tuple[Any, SameCall] | None] = ContextVar(
    "thunderviz_differentiating", default=None
)


@contextlib.contextmanager
def differentiating(bsym: Any, same_call: SameCall) -> Iterator[None]:
    """While the body runs, a call of `bsym`'s op for which `same_call(args, kwargs)` holds
    has `bsym`'s outputs for metadata, where the op has no meta kernel."""
    token = _current.set((bsym, same_call))
    try:
        yield
    finally:
        _current.reset(token)


def recorded_call(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Meta outputs for `op(*args, **kwargs)` (proxies) where it is the call being
    differentiated, or None."""
    current = _current.get()
    if current is not None:
        bsym, same_call = current
        if bsym.sym.fn is op and same_call(args, kwargs):
            return map_proxies(bsym.output, _as_meta)
    return None


def _as_meta(p: Proxy) -> Any:
    """What a meta kernel would have returned for a recorded output."""
    if isinstance(p, TensorProxy):
        return p.meta()
    return p.value if isinstance(p, NumberProxy) else p
