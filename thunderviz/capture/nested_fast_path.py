"""`nn.TransformerEncoder`'s nested-tensor fast path, as a trace runs it.

In eval mode without a gradient to keep, given a key padding mask, eager's encoder packs the
unpadded positions into a nested tensor, runs its layers on those alone, and pads the result
with zeros before its final norm: the padded positions come out as zeros (or as the norm of
zeros). One of its conditions is that no torch-function mode is active, so under a trace
it takes the standard path, where the padded positions are computed like the others. The
values at the unpadded positions agree; the padded ones, and whatever reads them (a decoder
attending to them, a mean over every position), did not.

So while a trace runs, the encoder's forward (the class attribute, for the tracing thread
only) runs as before, then, where eager would have taken the nested path, gives the padded
positions what eager gives them, with ops the trace records. The conditions are torch's own
(`TransformerEncoder.forward`); whether the mask is left-aligned is read from its values,
which the trace guards like any other value it branches on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch

from thunderviz.capture.class_patches import class_patched

__all__ = ["encoding_as_eager"]

_ORIGINAL = torch.nn.TransformerEncoder.forward
_tracing: ContextVar[bool] = ContextVar("thunderviz_encoder_as_eager", default=False)


@contextlib.contextmanager
def encoding_as_eager() -> Iterator[None]:
    """While the body runs, `nn.TransformerEncoder` called in this thread pads as eager's
    nested path does (see the module docstring); other threads' calls run torch's forward."""
    with class_patched(torch.nn.TransformerEncoder, "forward", _forward):
        token = _tracing.set(True)
        try:
            yield
        finally:
            _tracing.reset(token)


def _forward(
    self: torch.nn.TransformerEncoder,
    src: torch.Tensor,
    mask: torch.Tensor | None = None,
    src_key_padding_mask: torch.Tensor | None = None,
    is_causal: bool | None = None,
) -> torch.Tensor:
    out = _ORIGINAL(self, src, mask, src_key_padding_mask, is_causal)
    if not _tracing.get() or src_key_padding_mask is None or not _may_nest(self, src, mask):
        return out
    # (batch, sequence): True where a bool mask is, or a float mask is not 0 (torch makes a
    # bool mask a float one, -inf where padded, and keeps the positions where it is 0)
    padding = (
        src_key_padding_mask
        if src_key_padding_mask.dtype == torch.bool
        else src_key_padding_mask != 0
    )
    # left-aligned: along each sequence, padding only after the last position kept
    if getattr(self, "mask_check", True) and not bool((padding[:, 1:] >= padding[:, :-1]).all()):
        return out
    first: Any = self.layers[0]
    rows = padding if first.self_attn.batch_first else padding.transpose(0, 1)  # as `out`'s
    zeros = torch.zeros_like(out)
    filler = zeros if self.norm is None else self.norm(zeros)
    return torch.where(rows.unsqueeze(-1), filler, out)


def _may_nest(
    self: torch.nn.TransformerEncoder, src: torch.Tensor, mask: torch.Tensor | None
) -> bool:
    """Whether eager's forward converts to a nested tensor for this call, given a key padding
    mask that is left-aligned: torch's conditions, but for the one a trace itself fails (no
    torch-function mode)."""
    first: Any = self.layers[0]  # a TransformerEncoderLayer (torch's forward checks so too)
    if (
        not torch.backends.mha.get_fastpath_enabled()
        or not getattr(self, "use_nested_tensor", False)
        or first.training
        or src.dim() != 3
        or src.is_nested
        or mask is not None
        or torch.is_autocast_enabled()
        or src.device.type not in ("cpu", "cuda", "xpu")
    ):
        return False
    attn = first.self_attn
    weights = (
        src,
        attn.in_proj_weight,
        attn.in_proj_bias,
        attn.out_proj.weight,
        attn.out_proj.bias,
        first.norm1.weight,
        first.norm1.bias,
        first.norm2.weight,
        first.norm2.bias,
        first.linear1.weight,
        first.linear1.bias,
        first.linear2.weight,
        first.linear2.bias,
    )
    return not (torch.is_grad_enabled() and any(w.requires_grad for w in weights))
