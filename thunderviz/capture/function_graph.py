"""A user Function's call run with autograd recording: its outputs joined to its inputs as
`Function.apply` joins them.

A jitted call's augmented forward runs without autograd, and calls a user's Function
through `forward_with_ctx` (capture/custom_function.py), which takes the forward's inputs
and outputs out of any graph. A backward with `create_graph=True` through the call runs that
forward again with autograd recording (executor/double_backward.py), and the gradients'
graph must then reach through the Function as eager's does:

* through what the user's backward reads (`ctx.saved_tensors`): the forward gets the inputs
  themselves, not detached copies, so a saved input is the input (a custom square's
  backward `2 * g * x` is differentiated again as to `x`);
* through the Function's outputs, which later ops read and save (`1 / y`): each output is
  the result of a node whose backward is the user's backward on the call's ctx, as
  `Function.apply`'s node is; an output the forward saved for its backward is saved so
  too (a custom exp's backward `g * y` is differentiated again through `y`).

Left out either way, a gradient penalty through a model with a custom activation got no
second-order term from it, silently (None, or a graph missing the Function's part).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["joined_to_inputs", "keeps_graph"]


def keeps_graph(t: Any) -> bool:
    """Whether `t` is a value of a run recording autograd's graph (the recompute of a
    double backward), which the Function's forward must get as it is."""
    return isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled()


class _JoinedToInputs(torch.autograd.Function):
    """Outputs the user's forward computed (the first `n_outputs` tensors), as the outputs of
    a node over the inputs that need a gradient (the rest), whose backward is the user's."""

    @staticmethod
    def forward(ctx: Any, call: Any, user_ctx: Any, n_outputs: int, *tensors: torch.Tensor) -> Any:
        ctx.call, ctx.user_ctx, ctx.n_outputs = call, user_ctx, n_outputs
        ctx.set_materialize_grads(user_ctx.materialize_grads)  # None for an unused output
        outputs = tensors[:n_outputs]
        ctx.mark_non_differentiable(
            *(o for i, o in enumerate(outputs) if i in user_ctx._thunderviz_call.non_differentiable)
        )
        return tuple(o.view_as(o) for o in outputs)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        record = ctx.user_ctx._thunderviz_call
        tensor_positions = [i for i, meta in enumerate(record.outputs) if meta is not None]
        per_output: list[Any] = [None] * len(record.outputs)
        for i, g in zip(tensor_positions, grads, strict=True):
            per_output[i] = g
        grads_in = ctx.call.backward(ctx.user_ctx, *per_output)
        return (None, None, None, *([None] * ctx.n_outputs), *grads_in)


def joined_to_inputs(call: Any, user_ctx: Any, out: Any, run_args: tuple[Any, ...]) -> Any:
    """`out`, the user's forward's result on `run_args`, with its tensors joined to the inputs
    that need a gradient (then the held tensors that need one, in the order the user's
    backward returns their gradients: `AutogradFunctionCall.backward`). As it is where
    nothing needs a gradient. (An input written in place, `mark_dirty`, is a copy here, and
    also an output: joined, the output's history is the Function's, as eager's input's
    becomes.)"""
    record = user_ctx._thunderviz_call
    inputs = [
        a
        for a, need, meta in zip(run_args, user_ctx.needs_input_grad, record.inputs, strict=True)
        if need and meta is not None
    ]
    inputs += list(user_ctx._thunderviz_held)
    if not any(keeps_graph(t) for t in inputs):
        return out
    rejoined = getattr(call.cls, "rejoined", None)  # a Function of ours that joins itself
    if rejoined is not None:
        return rejoined(user_ctx, run_args, out)
    outs = out if isinstance(out, tuple) else (out,)
    tensors = [o for o in outs if isinstance(o, torch.Tensor)]
    joined = _JoinedToInputs.apply(call, user_ctx, len(tensors), *tensors, *inputs)
    # an output the forward saved (`ctx.save_for_backward(y)`, as exp and sigmoid do) is,
    # in eager, that output with its node: the user's backward reads it with its history
    # (a cycle, ctx -> output -> node -> ctx, that the collector frees; eager's saved
    # outputs refer to their node weakly, which a Python ctx cannot)
    as_joined = {id(t): j for t, j in zip(tensors, joined, strict=True)}
    user_ctx.to_save = tuple(as_joined.get(id(t), t) for t in user_ctx.to_save)
    replaced = iter(joined)
    result = tuple(next(replaced) if isinstance(o, torch.Tensor) else o for o in outs)
    return result if isinstance(out, tuple) else result[0]
