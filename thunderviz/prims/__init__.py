"""The primitive set: PyTorch's Core ATen opset.

Each prim is a `Symbol` that runs as `torch.ops.aten.X` and whose output shapes come from
torch's own meta kernels, so no shape logic is written here. `aten` mirrors
`torch.ops.aten`: `aten.mul.Tensor(a, b)` records a prim into the trace being built (or runs
it, outside of one).
"""

from thunderviz.prims.aten import aten, aten_symbol, is_core_aten, meta_outputs

__all__ = ["aten", "aten_symbol", "is_core_aten", "meta_outputs"]
