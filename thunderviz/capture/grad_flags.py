"""`x.requires_grad`, `x.is_leaf` and `x.grad_fn` as eager reads them, in the program and
inside a torch function's own Python body.

The tensors capture runs on never require grad (autograd records nothing while a trace
runs); the recorder answers the program's own `x.requires_grad` reads from the proxies
(`Recorder._read_property`). But inside the body of a torch function the program called,
the recorder's mode is off the stack, and the body reads the tensors' own flags: always
False. Where a body branches on them it takes another path than eager's:
`F.linear_cross_entropy` (torch 2.13) decides there whether its chunked kernel computes
the input's and the weight's gradients, and the trace got none.

So while a torch function whose code reads `requires_grad` runs, a mode answers those reads
as the recorder does, in its body and in the torch functions it calls; every other call runs
as it is. Only such functions get the mode: it costs a Python call per torch call inside.

`is_leaf` and `grad_fn` are the same kind of read: on the tensors capture runs on, every
value is a leaf without a `grad_fn`, where eager's intermediates that need a gradient are
neither, and `if h.is_leaf:` took the other branch. Both are answered from the proxies too:
where eager's `grad_fn` is a node, a stand-in that is not None (the node itself, a trace
does not build); an argument's, which jit does not key its calls by, is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from thunderviz.capture.given_tensors import refused
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BsymTag

__all__ = [
    "UNKNOWN",
    "REQUIRES_GRAD_SETTERS",
    "answering_grad_flags",
    "eager_read",
    "made_a_leaf",
]

REQUIRES_GRAD = torch._C.TensorBase.__dict__["requires_grad"]
IS_LEAF = torch._C.TensorBase.__dict__["is_leaf"]
GRAD_FN = torch._C.TensorBase.__dict__["grad_fn"]
GRAPH_PROPERTIES = (REQUIRES_GRAD, IS_LEAF, GRAD_FN)
_NAMES = frozenset({"requires_grad", "is_leaf", "grad_fn"})
UNKNOWN = object()
# Runs a torch function's body past the torch-function hop that led to a mode's handler
# (torch 2.13 and later; before, a body cannot be run with the mode on: its reads stay the
# tensors' own, and `answering_grad_flags` does nothing)
_SKIP_ONE_HOP = getattr(torch._C, "_skip_one_hop_torch_function", None)


def answering_grad_flags(recorder: Any, func: Callable[..., Any]) -> Any:
    """A context in which `func`'s body reads `requires_grad` as the program would."""
    code = getattr(func, "__code__", None)
    if _SKIP_ONE_HOP is None or code is None or _NAMES.isdisjoint(code.co_names):
        return contextlib.nullcontext()
    return _GradFlags(recorder)


def read_as_eager(recorder: Any, descriptor: Any, t: Any) -> Any:
    """What the program would read as `t.requires_grad`, `t.is_leaf` or `t.grad_fn`
    (`descriptor`), if the recorder knows `t`; else `UNKNOWN`."""
    proxy = recorder._proxies.get(id(t))
    if not isinstance(proxy, TensorProxy):
        return UNKNOWN
    if descriptor is REQUIRES_GRAD:
        return proxy.requires_grad
    name = "is_leaf" if descriptor is IS_LEAF else "grad_fn"
    if not proxy.requires_grad:
        return True if descriptor is IS_LEAF else None
    if proxy.name in recorder.input_names and proxy.name not in recorder.state_names:
        # an argument that needs a gradient: a leaf or not as the caller made it, which jit
        # does not key its calls by (a parameter is always a leaf)
        raise refused(
            recorder,
            name,
            f"reads the {name} of {proxy.name}, an argument that needs a gradient: whether "
            "it is a leaf is the caller's, and a jitted call is not keyed by it. Pass the "
            "answer in as an argument (`f(x, x.is_leaf)`).",
        )
    # a leaf: one of the modules' parameters, a value the program made one with
    # `requires_grad_()`, a factory's `requires_grad=True` (which capture keeps)
    leaf = (
        proxy.name in recorder.input_names
        or proxy.name in recorder.new_leaves
        or (t.requires_grad and t.is_leaf)
    )
    if descriptor is IS_LEAF:
        return leaf
    if leaf:
        return None
    return _NODE


class _TracedNode:
    """What a value the program computes that needs a gradient reads as its `grad_fn`:
    not None, as in eager (`if h.grad_fn is not None:`), and nothing more, for a trace
    builds no autograd graph while it runs."""

    def __getattr__(self, attribute: str) -> Any:
        raise AttributeError(
            f"thunderviz: grad_fn.{attribute}: a traced program's values have no autograd "
            "node while the trace runs (its backward is thunderviz's own). Walk the backward "
            "graph in thunderviz.show, or read autograd's graph outside the traced call."
        )

    def __repr__(self) -> str:
        return "<autograd node of a traced value>"


_NODE = _TracedNode()


def eager_read(recorder: Any, func: Any, args: tuple[Any, ...]) -> Any:
    """`read_as_eager` for a property getter `func` of `args[0]`, or `UNKNOWN`."""
    descriptor = getattr(func, "__self__", None)
    if args and descriptor in GRAPH_PROPERTIES:
        return read_as_eager(recorder, descriptor, args[0])
    return UNKNOWN


class _GradFlags(TorchFunctionMode):
    def __init__(self, recorder: Any) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        answer = eager_read(self.recorder, func, args)
        if answer is not UNKNOWN:
            return answer
        if getattr(func, "__code__", None) is None:  # C++ (an op, a method): reads no flag
            return func(*args, **(kwargs or {}))
        skip_one_hop = _SKIP_ONE_HOP
        assert skip_one_hop is not None  # (the mode is only made where torch has it)
        with self:  # on again for a Python body: the call skips the hop that led here
            return skip_one_hop(func, types, args, kwargs or {})


REQUIRES_GRAD_SETTERS = (torch.Tensor.requires_grad_, REQUIRES_GRAD.__set__)


def made_a_leaf(recorder: Any, t: torch.Tensor, flag: bool) -> torch.Tensor:
    """`t.requires_grad_()` (or `t.requires_grad = True`) in the program: from here on the
    program reads `t` as a new leaf that requires grad, which a `torch.autograd.grad` inside
    it can differentiate as to (`mix.requires_grad_()` in a WGAN-GP penalty). The trace
    names it anew (an `alias` recorded without gradient: as in eager, nothing flows back
    through it, for `t` required none). Turning a flag off, or on where it is on, changes
    nothing the trace holds. Where `t` is one of the program's inputs, the trace says so
    (`inputs_made_leaves`), and `jit` does to the user's tensor what eager does."""
    proxy = recorder.proxy_of(t)
    if not flag or not isinstance(proxy, TensorProxy) or proxy.requires_grad:
        return t
    if not (t.dtype.is_floating_point or t.dtype.is_complex):
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    leaf = recorder._new_proxy(t, requires_grad=True)  # (the one maker of a value's proxy)
    bsym = recorder._bsym(torch.ops.aten.alias.default, (proxy,), {}, leaf)
    bsym.tags.add(BsymTag.NO_GRAD)
    bsym.header = "requires_grad_(): a new leaf of autograd's graph"
    recorder.made_leaves.append(proxy.name)
    recorder.new_leaves.add(leaf.name)
    recorder._append(bsym)
    return t
