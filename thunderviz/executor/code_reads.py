"""The values a program's code reads from outside itself: globals and closure variables.

A trace holds what they were when it was made (`x * SCALE` with `SCALE = 2.0` is `x * 2.0`;
`act = torch.tanh` ran tanh), so `jit` snapshots them and retraces when one changes. Read
from: the jitted function (or module's `forward`), the `forward` of every submodule class
that is not torch's own, and, a few calls deep, the code those call by name: a global
helper, `self._attend(...)`, a function a module holds (`self.act = fn`), a
`functools.partial`'s function (and the arguments it binds), a callable object's
`__call__`; and the code the call's arguments bring: a function passed in (`loss_fn`), a
callable object's `__call__`, and the methods of an object passed in that the code calls by
name (`cfg.scale()`), with the class attributes it reads (`Cfg.scale`; the object's own
attributes are the call's key, `keys.value_key`). Plain values are compared by value;
plain lists, tuples, dicts, sets and dataclass instances by what they hold (changed in
place or not); functions, classes, modules, tensors, partials and callable objects
(captured by reference: rebinding the name is what changes) by identity. Also: each
function's default arguments, by what they hold; the class attributes a module's method
reads through `self` (`Model.scale = 3`), and that no instance shadows them (`model.scale =
3`); that no module's `forward` was replaced on the instance. An object passed in is
treated as a module is: the functions it holds (`cfg.act(y)`) are followed too. Code
reached any other way (a method of an attribute of an argument, `cfg.sub.fn()`) is not
looked at.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.executor.keys import MISSING, HeldContents, has_fields, snapshot_worthy

__all__ = ["code_constants"]

# How many calls deep from a forward a helper's reads are still snapshotted.
_MAX_DEPTH = 3
# A function's default arguments: what a call that leaves them out runs with
_DEFAULTS = ("__defaults__", "__kwdefaults__")


class _Attributes:
    """An object's attributes read like a dict (a function's `__defaults__`)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self.obj, name, default)


class _Cell:
    """A closure cell read like a one-entry dict, so it is snapshotted like an attribute."""

    __slots__ = ("cell",)

    def __init__(self, cell: Any) -> None:
        self.cell = cell

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self.cell.cell_contents
        except ValueError:  # an empty cell
            return default


def _is_users(obj: Any) -> bool:
    """Code of the program's own (torch's own reads are not a program's configuration)."""
    module = getattr(obj, "__module__", None) or ""
    return not (module == "torch" or module.startswith(("torch.", "thunderviz.executor")))


def _function(obj: Any) -> types.FunctionType | None:
    obj = getattr(obj, "__func__", obj)  # a bound method, a staticmethod/classmethod
    return obj if isinstance(obj, types.FunctionType) and _is_users(obj) else None


def names_looked_up(code: types.CodeType) -> dict[str, None]:
    """Names the code (and the comprehensions, lambdas and inner `def`s inside it) looks up
    as globals or attributes, in order (a dict used as an ordered set)."""
    names = dict.fromkeys(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.update(names_looked_up(const))
    return names


def code_constants(
    fn: Any, submodules: list[torch.nn.Module], arguments: Any = ()
) -> tuple[tuple[Any, ...], ...]:
    """(-1, holder, name, value) items for `changed_attribute`: every global and closure
    value worth a snapshot that the program's code reads, `arguments` (the call's, as a
    pytree) included (see the module docstring)."""
    start = _function(getattr(fn, "forward", fn))
    queue: list[tuple[types.FunctionType, type | None, int]] = [(start, None, 0)] if start else []
    passed = [x for x in pytree.tree_leaves(arguments) if not isinstance(x, torch.Tensor)]
    queue += [(f, None, 1) for x in passed for f in _callees(x)]  # `loss_fn(y)`
    # objects passed in whose methods the code may call (`cfg.scale()`)
    objects = {id(x): x for x in passed if _has_methods(x)}.values()
    classes = {type(m) for m in submodules}
    for cls in classes:
        forward = _function(getattr(cls, "forward", None))
        if forward is not None and _is_users(cls):
            queue.append((forward, cls, 0))
    out: list[tuple[Any, ...]] = []
    seen_code: set[types.CodeType] = set()
    seen_read: set[tuple[int, str]] = set()
    holders: dict[int, _Attributes] = {}  # one per object whose attributes are read

    def attributes(obj: Any) -> _Attributes:
        return holders.setdefault(id(obj), _Attributes(obj))

    while queue:
        func, cls, depth = queue.pop()
        if func.__code__ in seen_code:
            continue
        seen_code.add(func.__code__)
        names = names_looked_up(func.__code__)
        cells = zip(func.__code__.co_freevars, func.__closure__ or (), strict=False)
        reads = [(_Cell(cell), name) for name, cell in cells]
        reads += [(func.__globals__, name) for name in names]
        reads += [(_Attributes(func), name) for name in _DEFAULTS if getattr(func, name)]
        read, called = _through_objects(names, cls, submodules, objects, depth)
        out += read
        queue += called
        for holder, name in reads:
            value = holder.get(name, MISSING)
            if value is MISSING:  # (an attribute name: `self.helper` is read above)
                continue
            key = (id(holder) if not isinstance(holder, _Cell) else id(holder.cell), name)
            if key in seen_read:
                continue
            if not (snapshot_worthy(value) or isinstance(value, torch.Tensor)):
                held = _held(value)
                if held is not None:  # a list, dict or dataclass: what it holds
                    seen_read.add(key)
                    out.append((-1, holder, name, held))
                    if depth < _MAX_DEPTH:  # and the code of functions in it (`FNS[0](x)`)
                        queue += [(f, None, depth + 1) for f in _held_callees(value)]
                elif callees := _callees(value):  # a partial, a callable object
                    seen_read.add(key)
                    out.append((-1, holder, name, value))  # (by identity)
                    if isinstance(value, functools.partial):  # and the arguments it binds
                        reads += [(attributes(value), "args"), (attributes(value), "keywords")]
                    if depth < _MAX_DEPTH:
                        queue += [(f, None, depth + 1) for f in callees]
                elif has_fields(value):  # a settings object (`args.scale`): what it names
                    reads += [(attributes(value), n) for n in _settings_read(value, names)]
                continue
            seen_read.add(key)
            out.append((-1, holder, name, value))
            if _has_settings(value):  # `Config.scale`, `config.SCALE` (a module of its own)
                reads += [(attributes(value), n) for n in names if n in vars(value)]
            helper = _function(value)
            if helper is not None and depth < _MAX_DEPTH:
                queue.append((helper, None, depth + 1))
    out += [
        (i, m.__dict__, "forward", MISSING)  # `m.forward = patched` replaces what runs
        for i, m in enumerate(submodules)
        if "forward" not in m.__dict__
    ]
    return tuple(out)


def _through_objects(
    names: dict[str, None],
    cls: type | None,
    submodules: list[torch.nn.Module],
    objects: Any,
    depth: int,
) -> tuple[list[tuple[Any, ...]], list[tuple[types.FunctionType, type | None, int]]]:
    """What code's `names` reach through an object: through `self` (a module of class `cls`,
    where the code is a method), its class's attributes and the methods it calls
    (`self.helper(...)`, even where a global shares the name); through each object passed
    in, the same (`cfg.scale()`, `cfg.factor` where `factor` is `Cfg`'s)."""
    # (class, its instances, the instances whose shadowing of a class attribute is checked
    # here: a module's; an object passed in has its attributes in the call's key)
    owners = []
    if cls is not None:
        modules = [m for m in submodules if type(m) is cls]
        owners.append((cls, modules, modules))
    owners += [(type(obj), [obj], []) for obj in objects]
    read: list[tuple[Any, ...]] = []
    called: list[tuple[types.FunctionType, type | None, int]] = []
    for klass, instances, shadowing in owners:
        read += _class_attributes(klass, names, shadowing)
        if depth < _MAX_DEPTH:
            for name in names:
                called += _helpers_on_self(klass, name, instances, depth + 1)
    return read, called


def _helpers_on_self(
    cls: type, name: str, instances: list[torch.nn.Module], depth: int
) -> list[tuple[types.FunctionType, type | None, int]]:
    """What `self.<name>(...)` may call in an object of class `cls`: the class's method, and
    a function an instance (of `instances`, the program's objects of that class) holds
    (`self.act = lambda y: y * SCALE`, given to the constructor), whose reads are the
    program's as much as a method's."""
    found: list[tuple[types.FunctionType, type | None, int]] = []
    method = _function(getattr(cls, name, None))
    if method is not None:
        found.append((method, cls, depth))
    for m in instances:
        held = m.__dict__.get(name)
        if held is not None:
            found += [(f, None, depth) for f in _callees(held)]
    return found


def _held_callees(value: Any) -> list[types.FunctionType]:
    """The functions a list, tuple or dict of the program's holds: their code runs."""
    items = value.values() if isinstance(value, dict) else value
    if not isinstance(items, (list, tuple, type({}.values()))):
        return []
    return [f for item in items for f in _callees(item)]


def _settings_read(obj: Any, names: dict[str, None]) -> list[str]:
    """Which of `names` are settings of `obj`: its own attributes, and the plain class
    attributes an assignment to it would shadow (not methods or properties: code)."""
    own = vars(obj)
    return [n for n in names if n in own or _plain_class_attribute(type(obj), n)]


def _plain_class_attribute(cls: type, name: str) -> bool:
    for klass in cls.__mro__[:-1]:  # (not object's)
        if name in vars(klass):
            return not hasattr(type(vars(klass)[name]), "__get__")
    return False


def _has_settings(value: Any) -> bool:
    """A class or module of the program's own, whose attributes its code reads as settings
    (`Config.scale`, `config.SCALE` from a `config.py` next to it). A library's (torch's, the
    standard library's, an installed package's) are not the program's configuration."""
    if isinstance(value, type):
        return _is_users(value) and value.__module__ != "builtins"
    if not isinstance(value, types.ModuleType):
        return False
    top = value.__name__.partition(".")[0]
    where = getattr(value, "__file__", None) or ""
    return (
        bool(where)
        and top not in sys.stdlib_module_names
        and top not in ("torch", "thunderviz")
        and not any(part in where for part in ("site-packages", "dist-packages"))
    )


def _has_methods(value: Any) -> bool:
    """An instance of a Python class of the program's own (a config, a scaler passed in),
    whose methods are the program's code and whose attributes are its `__dict__`. (Modules
    and classes are not: their code is read as `self`'s, or by identity.)"""
    if isinstance(value, (type, types.ModuleType, torch.nn.Module, functools.partial)):
        return False
    kind = type(value)
    return (
        isinstance(getattr(value, "__dict__", None), dict)
        and kind.__module__ != "builtins"  # (a function: its code is followed as a callee)
        and _is_users(kind)
    )


def _callees(value: Any) -> list[types.FunctionType]:
    """The program's own code a call of `value` runs: a function's, a `functools.partial`'s
    function's, a callable object's `__call__` (an activation or scaler object passed in)."""
    if isinstance(value, functools.partial):
        return _callees(value.func)
    function = _function(value)
    if function is not None:
        return [function]
    if isinstance(value, (type, torch.nn.Module)) or not callable(value):
        return []
    call = _function(type(value).__call__)  # (a builtin's is no function: none)
    return [call] if call is not None else []


def _class_attributes(
    cls: type, names: dict[str, None], submodules: list[torch.nn.Module]
) -> list[tuple[Any, ...]]:
    """`self.scale` where `scale` is an attribute of the module's class: its value in the
    class (`Model.scale = 3` changes it), and its absence from each instance of the class
    (`model.scale = 3` shadows it)."""
    out: list[tuple[Any, ...]] = []
    for name in names:
        for klass in cls.__mro__:
            if not _is_users(klass) or name not in vars(klass):
                continue
            value = vars(klass)[name]
            if snapshot_worthy(value) and not isinstance(value, types.FunctionType):
                out.append((-1, vars(klass), name, value))
            elif (held := _held(value)) is not None:
                out.append((-1, vars(klass), name, held))
            else:
                break  # a method, property or descriptor: not a value the trace holds
            out += [
                (i, m.__dict__, name, MISSING)
                for i, m in enumerate(submodules)
                if type(m) is cls and name not in m.__dict__
            ]
            break
    return out


def _held(value: Any) -> HeldContents | None:
    """A global or closure value snapshotted by its contents: a plain list, tuple, dict or set
    (a function's defaults are a tuple), or a dataclass instance (a settings object). Other
    objects a module's globals hold (a logger, with caches it fills as it runs) are not: they
    would look changed at every call."""
    if type(value) in (list, tuple, dict, set) or dataclasses.is_dataclass(value):
        return HeldContents.of(value)
    return None
