"""`jit` of a plain function that uses modules:

    def loss_fn(x, y):
        return F.cross_entropy(model(x), y)   # `model`: a global (or a closure variable)

    def step(model, x, y):                    # or an argument
        return F.cross_entropy(model(x), y)

Eager trains `model`'s parameters through such a function. A trace of it alone would hold
them as constants: no gradient would reach them, and a parameter replaced later, or
`model.eval()`, would not be seen. So `jit` finds the modules the function reads from outside
(the globals it names and its closure variables) or is given as arguments, and treats them as
a module of its own, `FunctionModules`: their parameters and buffers become the trace's
inputs, and their flags, hooks and attributes are part of the key, as for a jitted module
(an argument module is also keyed by identity: each model its own trace). The function is
looked at itself, not the functions it calls: a tensor that needs a gradient and reaches the
trace any other way is refused (`refuse_captured_grads`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from thunderviz.core.locations import where
from thunderviz.core.proxies import proxies_in
from thunderviz.core.trace import Trace
from thunderviz.executor.code_reads import names_looked_up

__all__ = ["FunctionModules", "function_modules", "referenced_modules", "refuse_captured_grads"]


def referenced_modules(fn: Callable[..., Any]) -> dict[str, torch.nn.Module]:
    """The modules `fn` reads from outside, by the name it reads them under: the module a
    method is bound to, its closure variables, then the globals its code names."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    found: dict[str, torch.nn.Module] = {}
    owner = getattr(fn, "__self__", None)  # a module's method: `tv.jit(model.forward)`
    if isinstance(owner, torch.nn.Module):
        found["self"] = owner
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, torch.nn.Module):
            found[name] = value
    module_globals = getattr(fn, "__globals__", {})
    for name in names_looked_up(code):  # (a lambda's too: `jacobian(lambda z: model(z), x)`)
        value = module_globals.get(name)
        if isinstance(value, torch.nn.Module) and name not in found:
            found[name] = value
    return found


def function_modules(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, torch.nn.Module]:
    """The modules a call of the plain function `fn` uses: those it reads from outside, then
    those it is given as arguments (`loss_fn(model, batch)`), named as its parameters are."""
    modules = referenced_modules(fn)
    given = [
        (i, a) for i, a in enumerate((*args, *kwargs.values())) if isinstance(a, torch.nn.Module)
    ]
    if not given:
        return modules
    try:
        names = list(inspect.signature(fn).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):  # no signature to read, or a call it would refuse
        names = []
    positional = names[: len(args)] if len(names) >= len(args) else []
    for i, module in given:
        if i < len(args):
            name = positional[i] if i < len(positional) else f"arg{i}"
        else:
            name = list(kwargs)[i - len(args)]
        modules.setdefault(name, module)
    return modules


class FunctionModules(torch.nn.Module):
    """A plain function, run as the forward of a module whose submodules are the modules it
    reads from outside (named as the function names them)."""

    def __init__(self, fn: Callable[..., Any], modules: dict[str, torch.nn.Module]) -> None:
        super().__init__()
        for name, module in modules.items():
            # a name nn.Module already uses (`training`, `eval`) gets an underscore; only the
            # printed names of the trace's inputs read it
            self.add_module(name if not hasattr(self, name) else f"{name}_", module)
        # An instance attribute: `nn.Module.__call__` runs the function itself, and capture
        # names the trace's arguments from its signature.
        self.forward = fn

    def same_modules(self, modules: dict[str, torch.nn.Module]) -> bool:
        return list(map(id, modules.values())) == list(map(id, self._modules.values()))


def refuse_captured_grads(trace: Trace, name: str, module: torch.nn.Module | None = None) -> None:
    """Raise where a tensor that requires grad reached `trace` as a constant (read from
    outside by a function the jitted code calls, or held inside an object it was given):
    its gradient would be silently lost."""
    for constant, value in trace.constants.items():
        if not (isinstance(value, torch.Tensor) and value.requires_grad):
            continue
        first_use = next(
            (
                b
                for b in trace.bound_symbols
                if any(p.name == constant for p in proxies_in((b.args, b.kwargs), []))
            ),
            None,
        )
        used = (
            f", first used at {where(first_use.source, first_use.module_path)} by "
            f"{first_use.sym.name}"
            if first_use is not None
            else ""  # (by an op inside a call, or by none)
        )
        raise RuntimeError(
            f"thunderviz.jit({name}): the program reads a tensor that requires grad "
            f"({tuple(value.shape)}, {value.dtype}) from outside{used}: not an argument, "
            "nor a parameter or buffer of a module jit can see, so jit would run it as a "
            "constant and its gradient would be lost. Pass it to the jitted function as an "
            "argument, or reach it through a module that is the jitted module, one of its "
            "submodules, an argument, or a global or closure variable of the jitted function."
            + _set_by_own_hooks(value, module)
        )


def _set_by_own_hooks(value: torch.Tensor, module: torch.nn.Module | None) -> str:
    """Where the tensor is a plain attribute of the jitted module and the module has forward
    pre-hooks: most likely one of them computed it (the old `nn.utils.spectral_norm` and
    `weight_norm` set `module.weight` so on every call), outside the trace, since jit runs
    the jitted module's own hooks around the traced call (executor/hooks.py)."""
    if module is None or not module._forward_pre_hooks:
        return ""
    attribute = next((k for k, v in vars(module).items() if v is value), None)
    if attribute is None:
        return ""
    hooks = ", ".join(
        getattr(h, "__qualname__", type(h).__qualname__) for h in module._forward_pre_hooks.values()
    )
    return (
        f" It is `{type(module).__name__}.{attribute}`, a plain tensor attribute, which a "
        f"forward pre-hook of the jitted module ({hooks}) can set on every call: jit runs "
        "the jitted module's own hooks around the traced call, so what they compute comes "
        "from outside. Jit a module that holds this one, `thunderviz.jit(torch.nn.Sequential"
        "(module))`: the hooks of submodules run inside the traced program."
    )
