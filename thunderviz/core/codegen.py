"""Printing bound symbols as Python: one statement per bound symbol, Thunder style."""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from thunderviz.core.proxies import NumberProxy, Proxy, TensorProxy
from thunderviz.core.quoting import is_identifier, string
from thunderviz.core.symbol import BoundSymbol, SymbolKind

__all__ = [
    "codeval",
    "call_expression",
    "bsym_statement",
    "code_statement",
    "output_pattern",
    "type_comment",
]

_BINARY = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
    "matmul": "@",
    "and": "&",
    "or": "|",
    "xor": "^",
    "lshift": "<<",
    "rshift": ">>",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
}
_UNARY = {"neg": "-", "pos": "+", "invert": "~", "abs": "abs"}


def codeval(x: Any) -> str:
    """A Python expression for `x`, a value appearing as an argument in a trace."""
    if isinstance(x, Proxy):
        return x.name
    if isinstance(x, bool) or x is None:
        return repr(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "float('nan')"
        if math.isinf(x):
            return "float('inf')" if x > 0 else "-float('inf')"
        return repr(x)
    if isinstance(x, (int, str)):
        return repr(x)
    if isinstance(x, complex):
        return f"complex({codeval(x.real)}, {codeval(x.imag)})"  # nan and inf parts too
    if isinstance(x, torch.dtype):
        return f"torch.{str(x).removeprefix('torch.')}"
    if isinstance(x, torch.device):
        return f"torch.device({str(x)!r})"
    if isinstance(x, (torch.layout, torch.memory_format)):
        return str(x)  # 'torch.strided', 'torch.contiguous_format'
    if isinstance(x, torch.Size):
        return codeval(tuple(x))
    if isinstance(x, slice):
        return f"slice({codeval(x.start)}, {codeval(x.stop)}, {codeval(x.step)})"
    if x is Ellipsis:
        return "..."
    if isinstance(x, tuple):
        inner = ", ".join(codeval(v) for v in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    if isinstance(x, list):
        return "[" + ", ".join(codeval(v) for v in x) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{codeval(k)}: {codeval(v)}" for k, v in x.items()) + "}"
    if isinstance(x, torch.Generator):
        return "None"  # generators are process state, not trace values: the default one runs
    raise TypeError(f"cannot print a value of type {type(x).__name__} in a trace: {x!r}")


def _call_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [codeval(a) for a in args]
    # A keyword that is not a plain identifier (from a **kwargs the user built) is passed
    # as a quoted dict key, never pasted.
    parts += [
        f"{k}={codeval(v)}" if is_identifier(k) else f"**{{{string(k)}: {codeval(v)}}}"
        for k, v in kwargs.items()
    ]
    return ", ".join(parts)


def call_expression(bsym: BoundSymbol) -> str:
    """The right-hand side of a bound symbol's statement."""
    sym, args, kwargs = bsym.sym, bsym.args, bsym.kwargs
    if sym.kind is SymbolKind.OPERATOR and not kwargs:
        op = sym.operator or ""
        if op == "unpack" and len(args) == 1:
            return codeval(args[0])
        if op == "getitem" and len(args) == 2:
            return f"{codeval(args[0])}[{_index(args[1])}]"
        if op in _BINARY and len(args) == 2:
            return f"{codeval(args[0])} {_BINARY[op]} {codeval(args[1])}"
        if op.startswith("r") and op[1:] in _BINARY and len(args) == 2:
            return f"{codeval(args[1])} {_BINARY[op[1:]]} {codeval(args[0])}"
        if op in _UNARY and len(args) == 1:
            return (
                f"{_UNARY[op]}({codeval(args[0])})"
                if op == "abs"
                else f"{_UNARY[op]}{codeval(args[0])}"
            )
    if sym.kind is SymbolKind.METHOD and args:
        return f"{codeval(args[0])}.{sym.name}({_call_args(args[1:], kwargs)})"
    if sym.kind is SymbolKind.ATTRIBUTE and len(args) == 1:
        return f"{codeval(args[0])}.{sym.name}"
    return f"{sym.name}({_call_args(args, kwargs)})"


def _index(idx: Any) -> str:
    """Subscript text: x[:, 0] rather than x[(slice(None, None, None), 0)]."""

    def one(i: Any) -> str:
        if isinstance(i, slice):
            s = "" if i.start is None else codeval(i.start)
            e = "" if i.stop is None else codeval(i.stop)
            return f"{s}:{e}" if i.step is None else f"{s}:{e}:{codeval(i.step)}"
        return codeval(i)

    if isinstance(idx, tuple) and idx:
        return ", ".join(one(i) for i in idx)
    return one(idx)


def output_pattern(output: Any) -> str | None:
    """The assignment target for an output; None when the bound symbol returns nothing."""
    if output is None:
        return None
    if isinstance(output, Proxy):
        return output.name
    if isinstance(output, (tuple, list)):
        inner = [output_pattern(o) or "_" for o in output]
        if isinstance(output, list):
            return "[" + ", ".join(inner) + "]"
        return "(" + ", ".join(inner) + (",)" if len(inner) == 1 else ")")
    return "_"  # a constant output (an int from a shape query): nothing to bind


def type_comment(proxies: list[Proxy]) -> str:
    parts = []
    for p in proxies:
        if isinstance(p, TensorProxy | NumberProxy):
            parts.append(f'{p.name}: "{_type_string(p)}"')
    return ", ".join(parts)


def _type_string(p: TensorProxy | NumberProxy) -> str:
    if type(p) is TensorProxy and type(p.shape) is tuple:
        try:
            return _tensor_type(p.device.type, p.dtype, p.shape)
        except TypeError:  # a dimension that cannot be hashed
            pass
    return p.type_string()


# A trace's tensors come in a few types; a backward prints hundreds of statements of them.
@functools.lru_cache(maxsize=4096)
def _tensor_type(device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> str:
    return TensorProxy("", shape, dtype, torch.device(device)).type_string()


def code_statement(bsym: BoundSymbol) -> str:
    """`t0 = torch.nn.functional.linear(x, w, b)`: the statement without its type comment."""
    rhs = call_expression(bsym)
    target = output_pattern(bsym.output)
    return rhs if target is None else f"{target} = {rhs}"


def bsym_statement(bsym: BoundSymbol) -> str:
    """`t0 = torch.nn.functional.linear(x, w, b)  # t0: "cpu f32[4, 16]"`."""
    line = code_statement(bsym)
    comment = type_comment(bsym.flat_proxy_outs)
    return f"{line}  # {comment}" if comment else line
