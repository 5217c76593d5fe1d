"""Capture runs the program on copies of the user's tensors; the copies must have the user's
strides, or the trace records a program for another memory layout. The reference is what
eager PyTorch dispatches on the user's own tensor."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import thunderviz as tv


class _EagerOps(TorchDispatchMode):
    """Names of the ATen ops eager runs (the independent reference)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops.append(func.name())
        return func(*args, **(kwargs or {}))


def _flatten_then_scale(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1) * 2.0


LAYOUTS = {
    "gappy slice": lambda: torch.randn(4, 6)[:, :3],
    "strided slice": lambda: torch.randn(4, 6)[::2, 1:4],
    "expanded": lambda: torch.randn(4, 1).expand(4, 3),
    "transposed": lambda: torch.randn(3, 4).t(),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_trace_records_the_copy_eager_makes_for_the_user_layout(layout: str) -> None:
    x = LAYOUTS[layout]()
    with _EagerOps() as eager:
        expected = _flatten_then_scale(x)
    trace = tv.trace(_flatten_then_scale, x)
    recorded = " ".join(str(trace).split("\n"))
    for op in eager.ops:  # every kernel eager ran (a clone for a layout that cannot be viewed)
        assert op.split("::")[1].split(".")[0] in recorded, (op, str(trace))
    assert torch.equal(trace.python_callable()(x), expected)


def test_copy_keeps_strides_and_values_and_leaves_the_user_tensor_alone() -> None:
    base = torch.arange(24.0).reshape(4, 6)
    x = base[1:, ::2]
    seen = {}

    def probe(t: torch.Tensor) -> torch.Tensor:
        seen["stride"], seen["contiguous"] = t.stride(), t.is_contiguous()
        return t * 1.0

    out = tv.trace(probe, x).python_callable()(x)
    assert seen == {"stride": x.stride(), "contiguous": False}
    assert torch.equal(out, x)
    assert torch.equal(base, torch.arange(24.0).reshape(4, 6))
