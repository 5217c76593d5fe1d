"""Tensors a kernel fills from host memory, behind the dispatcher.

Some of torch's C++ composites make a tensor from Python numbers themselves: `ctc_loss`
with its lengths given as lists calls `at::tensor(lengths)`, which allocates with
`aten.empty` and copies the numbers in with a plain memcpy that no dispatch mode sees. A
trace would keep the `empty` and lose the copy: replayed, the op reads uninitialized memory
(CTC loss came out different on each call after the first).

So the recorder notes each tensor it sees made by an `empty` factory, and if such a tensor
is read before any recorded op writes it, what it holds came from outside the trace: it
becomes a constant of the trace, with the values it holds then (a trace specializes on the
Python numbers they came from, as on every other). An `out=` buffer or a tensor filled by
`fill_`/`copy_` is written before it is read, and stays what it is.
"""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.capture.dispatch_mode import unrecorded
from thunderviz.capture.recorder_state import tensor_proxy
from thunderviz.core.proxies import leaves
from thunderviz.prims.aliasing import is_view_op, mutated_arg_indices

__all__ = ["EMPTY_FACTORIES", "forget_written", "note_unfilled", "settle_host_filled"]

_aten = torch.ops.aten
EMPTY_FACTORIES = frozenset(
    {
        _aten.empty.memory_format,
        _aten.empty_strided.default,
        _aten.empty_like.default,
        _aten.new_empty.default,
        _aten.new_empty_strided.default,
        _aten.empty_permuted.default,
    }
)


def note_unfilled(recorder: Any, func: Any, args: Any, out: Any) -> None:
    """After `func` made `out`: an `empty` factory's tensor, or a view of a noted tensor,
    holds whatever is written next. (Tensors without storage, meta and fake, hold no values
    to keep.)"""
    if func in EMPTY_FACTORIES:
        made = isinstance(out, torch.Tensor) and out.device.type != "meta" and not _is_fake(out)
    else:
        made = is_view_op(func) and _unfilled(recorder, args[0]) and isinstance(out, torch.Tensor)
    if made:
        recorder.unfilled[id(out)] = recorder.proxy_of(out)


def settle_host_filled(recorder: Any, func: Any, args: Any, kwargs: Any) -> None:
    """Before `func` reads its arguments: a noted tensor it reads (not one it writes) that
    no recorded op has written since it was made becomes a constant holding its values."""
    if is_view_op(func):
        return  # a view reads no values (`note_unfilled` notes it in turn)
    written = mutated_arg_indices(func)
    written_names = {func._schema.arguments[i].name for i in written}
    read = [a for i, a in enumerate(args) if i not in written]
    read += [v for k, v in kwargs.items() if k not in written_names]
    for t in leaves(read, []):
        if _unfilled(recorder, t):
            _as_constant(recorder, t)


def forget_written(recorder: Any) -> None:
    """After a recorded write: the noted tensors it wrote hold the trace's values now, and
    are no longer noted (while any is, every op the recorder sees checks its arguments)."""
    proxies = recorder._proxies
    recorder.unfilled = {k: p for k, p in recorder.unfilled.items() if proxies.get(k) is p}


def _unfilled(recorder: Any, t: Any) -> bool:
    """Whether `t` is a noted tensor that no recorded op has written since."""
    made = recorder.unfilled.get(id(t)) if isinstance(t, torch.Tensor) else None
    return made is not None and recorder._proxies.get(id(t)) is made


def _as_constant(recorder: Any, t: torch.Tensor) -> None:
    del recorder.unfilled[id(t)]
    with unrecorded():
        value = t.detach().clone()
    name = recorder.names.fresh("c")
    recorder.constants[name] = value
    recorder.bind(t, tensor_proxy(name, value, requires_grad=False))


def _is_fake(t: torch.Tensor) -> bool:
    return isinstance(t, torch._subclasses.FakeTensor)
