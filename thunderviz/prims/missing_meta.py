"""Output metadata for ATen ops torch gives no meta kernel.

A grad rule builds its forward and backward code on proxies, whose shapes come from running
each op on meta tensors (`aten.meta_outputs`). A few kernels have no meta implementation
(CTC loss's backward, 3-d fractional max pooling's, multilabel margin loss's; CTC loss
itself with its lengths given as tensors), and a rule that emits one could not be built. Two
things stand in:

* the call being differentiated: a rule re-emits its op with the same arguments (to name its
  outputs), and those outputs are already known, as the trace recorded them
  (`differentiating`). This covers forward kernels whose output shapes depend on values
  (`_ctc_loss.Tensor`'s log-alpha is as long as the longest target).
* gradient kernels: each returns the gradient of one of its arguments, shaped and typed as
  that argument (`_GRADIENT_OF`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from thunderviz.core.proxies import NumberProxy, Proxy, TensorProxy, map_proxies

__all__ = ["SameCall", "differentiating", "stand_in"]

SameCall = Callable[[tuple[Any, ...], dict[str, Any]], bool]

# Backward kernel (its op id) -> the position of the argument whose gradient it returns
_GRADIENT_OF: dict[str, int] = {
    "aten._ctc_loss_backward.default": 1,  # (grad, log_probs, ...): d log_probs
    "aten._ctc_loss_backward.Tensor": 1,
    "aten.fractional_max_pool3d_backward.default": 1,  # (grad_output, self, ...): d self
    "aten.multilabel_margin_loss_backward.default": 1,  # (grad_output, self, ...): d self
}

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


def stand_in(op_id: str, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Meta outputs for `op(*args, **kwargs)` (proxies) without its meta kernel, or None
    when nothing stands in."""
    position = _GRADIENT_OF.get(op_id)
    if position is not None and isinstance(args[position], TensorProxy):
        return args[position].meta()
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
