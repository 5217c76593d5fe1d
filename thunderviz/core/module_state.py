"""Running a module with other tensors in place of its parameters and buffers.

Tracing runs the user's module on stand-ins (`torch.func.functional_call` and torch's
`_reparametrize_module`), and the debugger's autograd reference runs it on copies. torch
swaps the given tensors in at every path a tensor has and swaps the module's own back in the
same order: a module held at two paths (`nn.ModuleList([block, block])`, the same block
applied twice) was swapped twice, and the second restore put the first stand-in back. The
module kept plain tensors that require no grad as its parameters, and trained no more, even
run eagerly: the user's model was changed by being looked at. So the caller keeps every
parameter and buffer object it had, and puts back any torch did not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["own_tensors_kept"]


@contextlib.contextmanager
def own_tensors_kept(module: torch.nn.Module) -> Iterator[None]:
    """On exit, every parameter and buffer of `module` and its submodules is the object it
    was on entry (a value written into one in place stays: the object is the same)."""
    tables: list[dict[str, Any]] = [
        table for m in module.modules() for table in (m._parameters, m._buffers)
    ]
    held = [(table, dict(table)) for table in tables]
    try:
        yield
    finally:
        for table, before in held:
            for name, tensor in before.items():
                if name in table and table[name] is not tensor:
                    table[name] = tensor
