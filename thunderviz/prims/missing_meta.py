"""Output metadata for ATen ops where torch's meta kernel is missing, reads values, or is
slow to meet.

A grad rule builds its forward and backward code on proxies, whose shapes come from running
each op on meta tensors (`aten.meta_outputs`). A few kernels have no meta implementation
(CTC loss's backward, 3-d fractional max pooling's, multilabel margin loss's, learnable
fake quantization's (LSQ); CTC loss itself with its lengths given as tensors, packing a
padded sequence), or one that reads
values a meta tensor does not have (unpacking a sequence's gradient reads its batch sizes),
and a rule that emits one could not be built. Many others have one in Python (torch's
reference implementations, registered as meta kernels), which a process runs once per new
signature: in a fresh process BatchNorm's backward took 10 ms a shape, most of a ResNet's
first call beside BatchNorm's forward. Two things stand in:

* the call being differentiated: a rule re-emits its op with the same arguments (to name its
  outputs), and those outputs are already known, as the trace recorded them
  (`differentiating`). This covers forward kernels whose output shapes depend on values
  (`_ctc_loss.Tensor`'s log-alpha is as long as the longest target), and spares running any
  forward op's meta kernel again.
* gradient kernels: each returns the gradient of one of its arguments, shaped and typed as
  that argument, or as a size it is given (`_GRADIENTS`); these never run a meta kernel. A
  pointwise one is shaped by hand only where its gradient and input agree in shape and dtype
  (else torch's kernel decides the broadcast and the promotion).
  `tests/core/test_output_metadata.py` holds each to torch's own meta kernel.
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


def _likes(*positions: int) -> Callable[[tuple[Any, ...]], Any]:
    """Gradients of the arguments at `positions`, each shaped and typed as its argument."""
    return lambda args: tuple(args[i].meta() for i in positions)


def _pointwise(args: tuple[Any, ...]) -> Any:
    """A pointwise gradient kernel's (grad, input, ...): shaped and typed as `grad` where the
    two agree in shape and dtype; None (run the meta kernel) otherwise."""
    grad, x = args[0], args[1]
    if isinstance(x, TensorProxy) and grad.shape == x.shape and grad.dtype == x.dtype:
        return grad.meta()
    return None


def _softmax_grad(args: tuple[Any, ...]) -> Any:
    """(grad_output, output, dim, input_dtype): shaped as grad_output, of input_dtype."""
    return torch.empty(args[0].shape, dtype=args[3], device="meta")


def _batch_norm_grads(args: tuple[Any, ...]) -> Any:
    """(grad_out, input, weight, ..., output_mask): torch's kernel returns the input's
    gradient whatever the mask says, and the weight's and bias's (per channel, of the weight's
    dtype, or the input's without one) where it asks for them."""
    x, weight, mask = args[1], args[2], args[9]
    per_channel = weight.dtype if weight is not None else x.dtype
    channel = lambda wanted: (  # noqa: E731
        torch.empty((x.shape[1],), dtype=per_channel, device="meta") if wanted else None
    )
    return (x.meta(), channel(mask[1]), channel(mask[2]))


def _convolution_grads(args: tuple[Any, ...]) -> Any:
    """(grad_output, input, weight, bias_sizes, ..., output_mask): the input's, the weight's
    and the bias's gradients where the mask asks, of grad_output's dtype."""
    grad, x, weight, bias_sizes, mask = args[0], args[1], args[2], args[3], args[10]
    if mask[2] and bias_sizes is None:
        return None

    def empty(size: Any) -> torch.Tensor:
        return torch.empty(tuple(size), dtype=grad.dtype, device="meta")

    return (
        empty(x.shape) if mask[0] else None,
        empty(weight.shape) if mask[1] else None,
        empty(bias_sizes) if mask[2] else None,
    )


_aten = torch.ops.aten
# Backward kernel -> its output's metadata, from its arguments (proxies); None: run its meta
_GRADIENTS: dict[Any, Callable[[tuple[Any, ...]], Any]] = {
    _aten._ctc_loss_backward.default: _like(1),  # (grad, log_probs, ...): d log_probs
    _aten._ctc_loss_backward.Tensor: _like(1),
    _aten.fractional_max_pool3d_backward.default: _like(1),  # (grad_output, self, ...)
    _aten.multilabel_margin_loss_backward.default: _like(1),  # (grad_output, self, ...)
    _aten.multi_margin_loss_backward.default: _like(1),  # (grad_output, self, ...)
    _aten._standard_gamma_grad.default: _like(0),  # (self, output): d sample / d alpha
    _aten._pack_padded_sequence_backward.default: _sized(1, 0),  # (grad, input_size, ...)
    # (grad, self, scale, zero_point, ...): d self, d scale, d zero_point
    _aten._fake_quantize_learnable_per_channel_affine_backward.default: _likes(1, 2, 3),
    _aten._fake_quantize_learnable_per_tensor_affine_backward.default: _likes(1, 2, 3),
    # kernels whose meta is torch's Python reference
    _aten.native_batch_norm_backward.default: _batch_norm_grads,
    _aten.convolution_backward.default: _convolution_grads,
    _aten.nll_loss_backward.default: _like(1),  # (grad_output, self, target, ...)
    _aten._log_softmax_backward_data.default: _softmax_grad,
    _aten._softmax_backward_data.default: _softmax_grad,
    **dict.fromkeys(
        (
            _aten.threshold_backward.default,  # (grad_output, self, threshold)
            _aten.gelu_backward.default,
            _aten.silu_backward.default,
            _aten.sigmoid_backward.default,  # (grad_output, output)
            _aten.tanh_backward.default,
            _aten.hardtanh_backward.default,
            _aten.leaky_relu_backward.default,
            _aten.softplus_backward.default,
            _aten.hardswish_backward.default,
            _aten.hardsigmoid_backward.default,
            _aten.mish_backward.default,
        ),
        _pointwise,
    ),
}


def gradient_kernel(op: Any, args: tuple[Any, ...]) -> Any:
    """The meta output of a gradient kernel in `_GRADIENTS`, or None for any other op (or
    for a call its entry leaves to the meta kernel)."""
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
