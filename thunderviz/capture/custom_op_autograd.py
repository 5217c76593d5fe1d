"""Custom ops with an autograd formula of their own (`torch.library.custom_op` plus
`register_autograd`) in traces.

In eager, such an op's autograd kernel runs its forward as a `torch.autograd.Function`
whose backward is the registered one; the gradients are whatever that backward returns (a
fused kernel's, precomputed ones: torch's own `nn.LinearCrossEntropyLoss` returns the
gradients it computed in the forward and only scales them). A trace sees the op below
autograd, as one ATen call with no grad rule, and could only refuse it.

So a call of such an op that needs a gradient is recorded as that Function would run it:
one `Function.apply` call (capture/function_apply.py) of a Function made for the op, whose
forward calls the op and then its `setup_context`, and whose backward is the registered
one. It is differentiated like any user Function (autodiff/rules/custom_function.py): the
user's backward runs on the ctx the forward filled, as eager's does. The Function is made
once per op, and reads the op's formula when it runs (one registered later is the one
used, as in eager).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch._library.custom_ops import _maybe_get_opdef
from torch._library.utils import fill_defaults, has_kwarg_only_args, is_functional_schema
from torch.autograd.function import Function

from thunderviz.capture.function_apply import record_apply

__all__ = ["has_registered_autograd", "record_custom_op_call"]

_TORCH_OWN = frozenset({"aten", "prims"})  # no custom op there: the common case, quickly


def has_registered_autograd(func: Any) -> bool:
    """Whether `func` is a functional `torch.library.custom_op` with a registered backward."""
    if not isinstance(func, torch._ops.OpOverload) or func.namespace in _TORCH_OWN:
        return False
    opdef = _maybe_get_opdef(func)
    return (
        opdef is not None and opdef._backward_fn is not None and is_functional_schema(func._schema)
    )


def record_custom_op_call(recorder: Any, func: Any, args: Any, kwargs: Any) -> Any:
    """Record `func(*args, **kwargs)` as the `Function.apply` call eager's autograd kernel
    makes for it; returns its outputs. Called from inside the recorder's dispatch handler,
    where its modes are off the stack: they are back while the forward is recorded."""
    with recorder.function_mode, recorder.dispatch_mode:
        header = (
            f"custom op {func._schema.name}: its backward is the one "
            "torch.library.register_autograd gave it"
        )
        return record_apply(recorder, _function_for(func), args, kwargs, header)


@functools.cache
def _function_for(func: torch._ops.OpOverload) -> type[Function]:
    """The `torch.autograd.Function` eager's autograd kernel runs for `func` (see
    `torch._library.autograd.make_autograd_impl`), named after the op."""
    schema = func._schema
    kwarg_only = has_kwarg_only_args(schema)

    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        out = func(*args, **kwargs)
        setup_context = _opdef(func)._setup_context_fn
        if setup_context is not None:
            # the dispatcher drops arguments equal to their defaults; setup_context sees all
            inputs, keyword_only = fill_defaults(schema, args, kwargs)
            if kwarg_only:
                setup_context(ctx=ctx, inputs=inputs, keyword_only_inputs=keyword_only, output=out)
            else:
                setup_context(ctx=ctx, inputs=inputs, output=out)
        return out

    def backward(ctx: Any, *grads: Any) -> Any:
        return _opdef(func)._backward_fn(ctx, *grads)

    name = f"{func.namespace}_{func._schema.name.split('::', 1)[1]}"
    cls = type(
        name,
        (Function,),
        {
            "forward": staticmethod(forward),
            "backward": staticmethod(backward),
            "__module__": __name__,
            "__qualname__": name,
        },
    )
    return cls


def _opdef(func: torch._ops.OpOverload) -> Any:
    opdef = _maybe_get_opdef(func)
    assert opdef is not None, f"{func} is a custom op (has_registered_autograd)"
    return opdef
