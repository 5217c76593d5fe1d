"""torch's global settings that decide which ATen ops a torch-level call becomes, and what
they compute: the default dtype (what `torch.ones(3)` makes, and `int_tensor * 0.1`),
deterministic algorithms (on which torch's own Python picks other ops: `F.pad(mode=
"replicate")`, max_pool3d on a GPU), cuDNN's switch, float32 matmul precision and cuDNN's
TF32 switch (what a matmul or convolution rounds to on a GPU, and a program may read), and
the attention kernels allowed (`sdpa_kernel(SDPBackend.MATH)`: on the CPU the math ops
instead of the flash kernel). A trace holds what they were.

Read by jit's cache key (a trace made under one setting is not the program's under
another) and by the recorder, for a program that changes one as it runs: the ATen ops a
call made under other attention kernels are those kernels, named, so the call runs as those
ops; under another default dtype or the like, the same ops compute other things, so no run
of the trace is the program's (jit runs the program on every call)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["dispatch_settings", "changed_beyond_kernels"]

# Read on every jitted call (jit's key): C functions, bound once (~50 ns a call each)
_C = torch._C
_default_dtype = torch.get_default_dtype
_deterministic = _C._get_deterministic_algorithms
_cudnn = _C._get_cudnn_enabled
_matmul_precision = _C._get_float32_matmul_precision
_cudnn_tf32 = _C._get_cudnn_allow_tf32
# which attention kernels may run
_flash = _C._get_flash_sdp_enabled
_mem_efficient = _C._get_mem_efficient_sdp_enabled
_math = _C._get_math_sdp_enabled
_cudnn_attention = _C._get_cudnn_sdp_enabled
_overrideable = _C._get_overrideable_sdp_enabled
_NAMES = (
    "the default dtype",
    "deterministic algorithms",
    "cuDNN's switch",
    "float32 matmul precision",
    "cuDNN's TF32 switch",
)


def dispatch_settings() -> tuple[Any, ...]:
    """The settings as they are now: (default dtype, deterministic algorithms, cuDNN on,
    float32 matmul precision, cuDNN's TF32, (each attention kernel allowed))."""
    return (
        _default_dtype(),
        _deterministic(),
        _cudnn(),
        _matmul_precision(),
        _cudnn_tf32(),
        (_flash(), _mem_efficient(), _math(), _cudnn_attention(), _overrideable()),
    )


def changed_beyond_kernels(before: tuple[Any, ...], now: tuple[Any, ...]) -> str:
    """'' where `now` differs from `before` in the attention kernels allowed at most, else
    what changed, in words."""
    return "; ".join(
        f"{name}: {was!r} -> {is_!r}"
        for name, was, is_ in zip(_NAMES, before[:-1], now[:-1], strict=True)  # (not kernels)
        if was != is_
    )
