"""torch's global switches for which kernel an op dispatches to: the attention kernels
allowed (`torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`) and cuDNN's. A call of
`scaled_dot_product_attention` runs other ATen ops under another setting (on the CPU, the
math ops instead of the flash kernel), so a trace holds what the switches were.

Read by jit's cache key (a trace made under one setting is not the program's under
another) and by the recorder (a torch-level call made where the program flipped a switch
runs as the ATen ops eager ran: called whole, it would pick its kernel from the switches
when the trace runs, which the program's context manager no longer sets)."""

from __future__ import annotations

import torch

__all__ = ["kernel_switches"]

# each a C call of ~50 ns
_SWITCHES = (
    torch._C._get_flash_sdp_enabled,
    torch._C._get_mem_efficient_sdp_enabled,
    torch._C._get_math_sdp_enabled,
    torch._C._get_cudnn_sdp_enabled,
    torch._C._get_overrideable_sdp_enabled,
    torch._C._get_cudnn_enabled,
)


def kernel_switches() -> tuple[bool, ...]:
    """The switches as they are now."""
    return tuple(allowed() for allowed in _SWITCHES)
