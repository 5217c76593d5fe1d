"""Whether a call a grad rule makes is the call it differentiates: the same symbol with the
same argument values. The sweep asks it twice: to give a rule's re-emitted op the outputs the
trace recorded for it (`prims/missing_meta.differentiating`), and to tell a rule that returns
its own call unchanged."""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.core.symbol import BoundSymbol
from thunderviz.prims.call_args import op_args

__all__ = ["passes_values_of", "same_args"]


def passes_values_of(bsym: BoundSymbol, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call of `bsym`'s symbol with `args` and `kwargs` is `bsym`'s call: its very
    arguments passed back (what most rules re-emitting their op do, and quick to tell), or
    the same values, defaults spelled out or not (the dispatcher drops trailing defaults; a
    rule may write them)."""
    return _passes_back(bsym, args, kwargs) or repr(_values(bsym, bsym.args, bsym.kwargs)) == repr(
        _values(bsym, args, kwargs)
    )


def same_args(a: BoundSymbol, b: BoundSymbol) -> bool:
    """Whether two calls of one symbol pass the same values."""
    return passes_values_of(a, b.args, b.kwargs)


def _passes_back(bsym: BoundSymbol, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return (
        len(args) == len(bsym.args)
        and all(a is b for a, b in zip(args, bsym.args, strict=True))
        and kwargs.keys() == bsym.kwargs.keys()
        and all(v is bsym.kwargs[k] for k, v in kwargs.items())
    )


def _values(bsym: BoundSymbol, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    fn = bsym.sym.fn
    if not isinstance(fn, torch._ops.OpOverload):
        return args, kwargs
    return op_args(fn, args, kwargs)
