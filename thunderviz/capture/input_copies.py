"""What a traced program runs on instead of the user's tensors: copies with their exact
layout (real tensors), or FakeTensors with the same metadata (capture/fake_inputs.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from thunderviz.capture.fake_inputs import fake_converter

__all__ = ["converter", "copy_with_strides"]


def converter(fake_mode: Any, tensors: list[Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    """What the program runs on instead of the user's tensor: a detached copy (real mode) or
    a FakeTensor with the same metadata. Neither requires grad: whether a value needs a
    gradient is tracked on the proxies, so autograd records nothing while we trace (no
    graph, no saved-tensor bookkeeping in the recording) and the user's tensor is never
    touched."""
    if fake_mode is not None:  # `tensors`: all it will convert, to see which share storage
        return fake_converter(fake_mode, tensors)

    def to_copy(t: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return copy_with_strides(t.detach())

    return to_copy


def copy_with_strides(t: torch.Tensor) -> torch.Tensor:
    """A copy with the user's exact strides and conjugate and negative bits (a `conj()` view
    reads as one: `view_as_real` refuses it until `resolve_conj()`, which the program then
    calls and the trace must hold). `clone()` resolves those bits, and keeps the strides of
    a dense tensor (contiguous, transposed) but makes a gappy view such as `x[:, ::2]` or an
    expanded one contiguous; the program would then be recorded on a layout it never sees at
    run time (a `.contiguous()` or `reshape` copy is a no-op on the copy and is not recorded,
    and a kernel that reads raw memory gets other strides). So such a view is copied as the span
    of storage it covers and re-viewed with the same strides (not as a view of that span,
    so capture sees an input, not a view of something the program never had)."""
    if t.is_conj():
        return copy_with_strides(t.conj()).conj()
    if t.is_neg():
        negate = torch.ops.aten._neg_view.default  # (a view with the bit flipped)
        return negate(copy_with_strides(negate(t)))
    copy = t.clone()
    if t.layout is not torch.strided or copy.stride() == t.stride() or t.numel() == 0:
        return copy  # (a sparse tensor has no strides to keep)
    span = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    flat = torch.as_strided(t, (span,), (1,), t.storage_offset()).clone()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        flat.untyped_storage(), 0, t.shape, t.stride()
    )
