"""torch._dynamo left unimported while thunderviz traces, differentiates and compiles.

Recording runs torch's Python reference implementations (`torch._refs`, the decompositions,
the prims' meta functions) on proxies and meta tensors, and torch wraps most of them in
`torch._disable_dynamo`, which imports `torch._dynamo` at each one's first call to build the
wrapper that keeps dynamo out of it. In a script or notebook that has not imported dynamo
yet (no optimizer built, no transformers imported), that import was most of the first
`trace` or `jit` call: a small program's first call took 0.79 s in a fresh process, 0.28 s
without it (what remains is torch's own lazy imports, sympy's the largest, which the refs
make everywhere).

Keeping dynamo out of a function only matters while dynamo evaluates frames, which it cannot
do before it is imported. So while thunderviz works and `torch._dynamo` is not imported, the
import `_disable_dynamo` makes is answered with a stand-in whose `disable` returns the
function itself, which then runs as it would under the real wrapper. `_disable_dynamo`
caches what `disable` returned on the function (`fn.__dynamo_disable`): those caches are
removed when the outermost scope ends, so the first call after it builds the real wrapper,
as if thunderviz had never run. Only the import made from `torch._compile` is answered; every
other one (a model's own `import torch._dynamo`) is the real import, and once dynamo is
imported (by anything) the stand-in is no longer given. Scopes nest and threads may hold
them at once: the import hook is installed by the first and removed by the last.
"""

from __future__ import annotations

import builtins
import sys
import types
from typing import Any

from thunderviz.core.scopes import OutermostScope

__all__ = ["dynamo_import_deferred"]

_DYNAMO = "torch._dynamo"
_CACHE = "__dynamo_disable"  # the attribute `torch._compile._disable_dynamo` caches on
_real_import: Any = None  # the import our hook passes on to, while it is installed
_undisabled: list[Any] = []  # the functions whose cache holds the stand-in's answer


def _disable(fn: Any, recursive: bool = True, wrapping: bool = True) -> Any:
    """`torch._dynamo.disable` with no dynamo: the function runs as it is."""
    _undisabled.append(fn)
    return fn


# What `import torch._dynamo` binds in `_disable_dynamo`: the name `torch`
_STAND_IN = types.SimpleNamespace(_dynamo=types.SimpleNamespace(disable=_disable))


def _import(name: str, globals: Any = None, *args: Any, **kwargs: Any) -> Any:
    if (
        dynamo_import_deferred.held
        and name == _DYNAMO
        and globals
        and globals.get("__name__") == "torch._compile"
        and _DYNAMO not in sys.modules
    ):
        return _STAND_IN
    return _real_import(name, globals, *args, **kwargs)


def _install() -> None:
    global _real_import
    if _real_import is None and _DYNAMO not in sys.modules:
        _real_import = builtins.__import__
        builtins.__import__ = _import


def _uninstall() -> None:
    global _real_import
    if builtins.__import__ is _import:  # (else another hook wraps ours: it stays, and
        builtins.__import__ = _real_import  # passes every import on)
        _real_import = None
    for fn in _undisabled:
        if getattr(fn, _CACHE, None) is fn:
            delattr(fn, _CACHE)
    _undisabled.clear()


dynamo_import_deferred = OutermostScope(_install, _uninstall)
