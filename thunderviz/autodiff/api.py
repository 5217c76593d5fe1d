"""Function transforms over traces: `vjp`, `value_and_grad`, `grad`.

Each traces the function on the given inputs, runs our autodiff, and computes by running the
generated augmented-forward and backward traces on torch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.autodiff.inner_grad import grad_of_recording
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules import BUILTIN_RULES
from thunderviz.autodiff.vjp import AutodiffResult, autodiff
from thunderviz.capture import trace
from thunderviz.capture.recorder import INNER_GRAD
from thunderviz.core.dataclass_nodes import opened, opened_leaves
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.run_errors import run_attributed
from thunderviz.core.trace import Trace
from thunderviz.core.working import working

__all__ = ["vjp", "value_and_grad", "grad", "differentiate", "user_rules", "register_grad"]

# Rules users add with `thunderviz.register_grad`; they take precedence over the built-ins.
user_rules = RuleSet("user")
register_grad = user_rules.grad


def active_rules() -> RuleSet:
    return RuleSet.merged("active", [BUILTIN_RULES, user_rules])


def differentiate(forward: Trace, **kwargs: Any) -> AutodiffResult:
    """Forward trace -> augmented forward, backward and saved-for-backward (see AutodiffResult)."""
    if not isinstance(forward, Trace):
        raise TypeError(
            "thunderviz.autodiff expects a Trace (from thunderviz.trace), "
            f"got {type(forward).__name__}"
        )
    with working():  # core/working.py
        return autodiff(forward, active_rules(), **kwargs)


# `torch.autograd.grad` inside a traced program is this module's VJP of the recording so far
INNER_GRAD[:] = [functools.partial(grad_of_recording, differentiate, active_rules)]


def _with_grad(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Float tensors become leaves that require grad, so the trace differentiates them."""

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            return x.detach().requires_grad_(True)
        return x

    return pytree.tree_map(leaf, opened(args))  # (a dataclass's fields too)


def _run(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[AutodiffResult, Any, Any, list[torch.Tensor]]:
    forward = trace(fn, *_with_grad(args), **kwargs)
    result = differentiate(forward)
    pos, kw = forward.bind_inputs(fn, args, kwargs)
    out, saved = run_attributed(result.augmented_forward, *pos, **kw)
    return result, out, saved, [*pos, *kw.values()]


def vjp(fn: Callable[..., Any]) -> Callable[..., tuple[Any, Any]]:
    """`vjp(fn)(primals, cotangents) -> (outputs, grads)`; `grads` has one entry per leaf of
    `primals` (None where no gradient flows)."""

    @functools.wraps(fn)
    def wrapped(primals: Any, cotangents: Any, **kwargs: Any) -> tuple[Any, Any]:
        primals = tuple(primals) if isinstance(primals, (tuple, list)) else (primals,)
        result, out, saved, _ = _run(fn, primals, kwargs)
        cts = pytree.tree_leaves(cotangents)
        wanted = {p.name for p in result.cotangent_outputs}
        flat_out = [p for p in result.forward.flat_outputs]
        by_name = result.cotangents_by_name(list(zip(flat_out, cts, strict=False)))
        ordered = [by_name[p.name] for p in result.cotangent_outputs if p.name in wanted]
        grads = run_attributed(result.backward, tuple(saved), tuple(ordered))
        n_leaves = len(opened_leaves(primals))
        return out, tuple(grads[:n_leaves])

    return wrapped


def value_and_grad(fn: Callable[..., Any]) -> Callable[..., tuple[Any, tuple[Any, ...]]]:
    """`value_and_grad(fn)(*args) -> (value, grads)` for a scalar-valued `fn`; one gradient
    per leaf of `args` (for a module: the inputs, then its parameters and buffers)."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> tuple[Any, tuple[Any, ...]]:
        result, out, saved, values = _run(fn, args, kwargs)
        leaves = [p for p in result.forward.flat_outputs if isinstance(p, TensorProxy)]
        if len(leaves) != 1 or leaves[0].numel != 1:
            raise ValueError(
                "value_and_grad needs a function returning one scalar tensor; "
                f"this one returns {[p.type_string() for p in leaves]}. Use vjp."
            )
        cts = tuple(torch.ones_like(pytree.tree_leaves(out)[0]) for _ in result.cotangent_outputs)
        grads = run_attributed(result.backward, tuple(saved), cts)
        n = (
            len(result.forward.args)
            if isinstance(fn, torch.nn.Module)
            else len(opened_leaves(args))
        )
        return out, tuple(grads[:n])

    return wrapped


def grad(fn: Callable[..., Any]) -> Callable[..., tuple[Any, ...]]:
    """`grad(fn)(*args) -> grads`: value_and_grad without the value."""
    vg = value_and_grad(fn)

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return vg(*args, **kwargs)[1]

    return wrapped
