"""Stand-ins for `sympy` and `torch.fx.experimental.symbolic_shapes`, exact for plain values.

Torch's reference kernels, decompositions and `torch._check` import both lazily, inside the
function, at nearly every call: `import sympy` to ask `isinstance(x, sympy.Basic)`, and
`from torch.fx.experimental.symbolic_shapes import guard_or_false, sym_eq, ...` to compare
sizes that may be symbolic. Thunderviz traces with concrete sizes, so every value those
helpers see while it works is a plain bool or int, and the answer is the value itself; but
the first such import in a process loads sympy, 0.4-0.5 s of a script's first `jit` call
(a small program's whole call was 0.55 s, 0.05 s without it).

So, while thunderviz works (`core/deferred_imports.py`), such an import made from torch is
answered with one of these objects, which are exact by construction rather than by
assumption:

- An answered helper returns the plain answer only when its arguments are plain (exactly
  bool or int, lists and tuples of ints, or, for `free_unbacked_symbols`, a strided tensor
  of plain sizes, strides and offset), the case where the real helper's answer is written
  out below; for anything else, or with the real module loaded, it imports the real module
  and calls the real helper. (`free_unbacked_symbols` is asked by the meta kernels of
  `select_scatter`, `slice_scatter`, `diagonal_scatter` and `copy_`: the backward of
  `x[0]`, `x[:, 1:]` or `x.diagonal()` loaded sympy, 0.28 s of such a program's 8 ms first
  call.)
- `sympy.Basic` is a class nothing is an instance of while sympy is not loaded (no sympy
  object can exist before sympy is imported), and sympy's own once it is.
- Any other attribute is the real module's, imported then.

Each answer is looked up again at every use, so a stand-in that outlives the scope (bound
where torch imported it) stays exact after the real module loads.
"""

from __future__ import annotations

import functools
import importlib
import operator
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._ordered_set import OrderedSet

__all__ = ["SHAPES", "SYMPY", "stand_in_for"]

SHAPES = "torch.fx.experimental.symbolic_shapes"
SYMPY = "sympy"


def _is_bool(*args: Any) -> bool:
    return len(args) == 1 and type(args[0]) is bool


def _is_int(*args: Any) -> bool:
    return len(args) == 1 and type(args[0]) is int


def _is_number(*args: Any) -> bool:
    return len(args) == 1 and type(args[0]) in (bool, int, float)


def _are_bools(*args: Any) -> bool:
    return len(args) >= 1 and all(type(a) is bool for a in args)


def _int_tree(x: Any) -> bool:
    if isinstance(x, (list, tuple)):  # torch.Size included, as the real sym_eq takes it
        return all(map(_int_tree, x))
    return type(x) in (bool, int)


def _are_int_trees(*args: Any) -> bool:
    return len(args) == 2 and _int_tree(args[0]) and _int_tree(args[1])


def _sym_eq(x: Any, y: Any) -> bool:
    """symbolic_shapes.sym_eq on ints and (nested) sequences of ints."""
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        if len(x) != len(y):
            return False
        return functools.reduce(operator.and_, map(_sym_eq, x, y), True)
    if isinstance(x, (list, tuple)) or isinstance(y, (list, tuple)):
        raise AssertionError(f"unexpected sym_eq between {type(x)} {type(y)}")  # as torch's
    return x == y


def _itself(a: Any) -> Any:
    return a


def _without_symbols(*args: Any) -> bool:
    """One value in which the real `free_symbols` finds nothing to look at: None, a plain
    int tree, or a strided tensor whose sizes, strides and offset are plain ints (a meta
    or fake tensor of a trace's concrete sizes: a scatter's or copy's meta kernel asks)."""
    if len(args) != 1:
        return False
    x = args[0]
    if x is None:
        return True
    if type(x) in (torch.Tensor, torch.nn.Parameter, torch._subclasses.FakeTensor):
        return (
            x.layout is torch.strided
            and _int_tree(tuple(x.shape))
            and _int_tree(x.stride())
            and type(x.storage_offset()) is int
        )
    return _int_tree(x)


def _no_symbols(x: Any) -> Any:
    return OrderedSet()  # what the real helper returns, of the same type


# name -> (when the arguments are plain, what the real helper returns for them)
_PLAIN_ANSWERS: dict[str, tuple[Callable[..., bool], Callable[..., Any]]] = {
    "expect_true": (_is_bool, _itself),
    "guard_or_false": (_is_bool, _itself),
    "guard_or_true": (_is_bool, _itself),
    "guard_size_oblivious": (_is_bool, _itself),
    "statically_known_true": (_is_bool, _itself),
    "guard_int": (_is_int, _itself),
    "guarding_hint_or_throw": (lambda *a: _is_bool(*a) or _is_int(*a), _itself),
    "has_guarding_hint": (_is_number, lambda a: True),
    "is_nested_int": (_is_number, lambda a: False),
    "sym_and": (_are_bools, lambda x, *others: functools.reduce(operator.and_, others, x)),
    "sym_or": (_are_bools, lambda x, *others: functools.reduce(operator.or_, others, x)),
    "sym_eq": (_are_int_trees, _sym_eq),
    "free_unbacked_symbols": (_without_symbols, _no_symbols),
}


def _answer(name: str) -> Callable[..., Any]:
    is_plain, plain = _PLAIN_ANSWERS[name]

    def answer(*args: Any, **kwargs: Any) -> Any:
        if SHAPES not in sys.modules and not kwargs and is_plain(*args):
            return plain(*args)
        return getattr(importlib.import_module(SHAPES), name)(*args, **kwargs)

    answer.__name__ = answer.__qualname__ = name
    return answer


_ANSWERS = {name: _answer(name) for name in _PLAIN_ANSWERS}


class _NoSympyObject:
    """`sympy.Basic` while sympy is not loaded: nothing is an instance of it."""


class _StandIn:
    """What `import sympy` / `from ...symbolic_shapes import ...` binds: each attribute
    looked up at each use, the answer while the real module is not loaded, the real one
    otherwise."""

    def __init__(self, module: str, answers: dict[str, Any]) -> None:
        self._module, self._answers = module, answers

    def __getattr__(self, attr: str) -> Any:
        if self._module in sys.modules or attr not in self._answers:
            return getattr(importlib.import_module(self._module), attr)
        return self._answers[attr]

    def __repr__(self) -> str:
        return f"<thunderviz's stand-in for {self._module}>"


_STAND_INS = {
    SHAPES: _StandIn(SHAPES, _ANSWERS),
    SYMPY: _StandIn(SYMPY, {"Basic": _NoSympyObject}),
}


def stand_in_for(name: str, fromlist: Any, level: int) -> _StandIn | None:
    """The stand-in that answers this import statement, if one does: `import sympy`, and
    `from torch.fx.experimental.symbolic_shapes import ...`, while the module is unloaded.
    (`import torch.fx.experimental.symbolic_shapes` binds `torch`, and `from sympy import
    Basic` would bind a name once: those are left to the real import.)"""
    if level != 0 or name in sys.modules:
        return None
    if name == SYMPY and not fromlist:
        return _STAND_INS[SYMPY]
    if name == SHAPES and fromlist:
        return _STAND_INS[SHAPES]
    return None
