"""Torch's lazy imports of torch._dynamo and sympy, left undone while thunderviz works.

Recording runs torch's Python reference implementations (`torch._refs`, the decompositions,
the prims' meta functions) on proxies and meta tensors, and those import two heavy modules
on first use, which in a script that has not imported them yet (no optimizer built, no
transformers imported) were most of the first `trace` or `jit` call:

- torch wraps most of them in `torch._disable_dynamo`, which imports `torch._dynamo` at each
  one's first call to build the wrapper that keeps dynamo out of it: ~0.5 s.
- they, and `torch._check`, import `sympy` and `torch.fx.experimental.symbolic_shapes`
  inside the function to handle sizes that may be symbolic: ~0.45 s. Thunderviz's sizes are
  concrete.

So while thunderviz works (the `working()` scope), an import hook answers exactly those
imports, made from torch's own modules, with stand-ins, where the real module is not
loaded yet:

- For `torch._dynamo`, imported from `torch._compile`: a namespace whose `disable` returns
  the function itself, which then runs as it would under the real wrapper (keeping dynamo
  out of a function only matters while dynamo evaluates frames, which it cannot do before it
  is imported). `_disable_dynamo` caches what `disable` returned on the function
  (`fn.__dynamo_disable`): those caches are removed when the outermost scope ends, so the
  first call after it builds the real wrapper, as if thunderviz had never run.
- For sympy and symbolic_shapes: `core/symbolic_stand_ins.py`, exact for plain values and
  the real module's answer for anything else. Only imports made inside a function are
  answered (those bind a local that dies with the call); a module's top-level imports are
  left to the real import, so no torch module keeps a stand-in among its globals.

Every other import, a model's own included, is the real one. Scopes nest and threads may
hold them at once: the hook is installed by the first and removed by the last.
"""

from __future__ import annotations

import builtins
import sys
import types
from typing import Any

from thunderviz.core.scopes import OutermostScope
from thunderviz.core.symbolic_stand_ins import SHAPES, SYMPY, stand_in_for

__all__ = ["imports_deferred"]

_DYNAMO = "torch._dynamo"
_DEFERRED = (_DYNAMO, SHAPES, SYMPY)
_CACHE = "__dynamo_disable"  # the attribute `torch._compile._disable_dynamo` caches on
_real_import: Any = None  # the import our hook passes on to, while it is installed
_undisabled: list[Any] = []  # the functions whose cache holds the dynamo stand-in's answer


def _disable(fn: Any, recursive: bool = True, wrapping: bool = True) -> Any:
    """`torch._dynamo.disable` with no dynamo: the function runs as it is."""
    _undisabled.append(fn)
    return fn


# What `import torch._dynamo` binds in `_disable_dynamo`: the name `torch`
_DYNAMO_STAND_IN = types.SimpleNamespace(_dynamo=types.SimpleNamespace(disable=_disable))


def _stand_in(name: str, importer: str, fromlist: Any, level: int) -> Any:
    if sys._getframe(2).f_code.co_name == "<module>":
        return None  # a module's own imports bind its globals for good: always the real one
    if name == _DYNAMO:
        if importer == "torch._compile" and _DYNAMO not in sys.modules:
            return _DYNAMO_STAND_IN
        return None
    if importer == "torch" or importer.startswith("torch."):
        return stand_in_for(name, fromlist, level)
    return None


def _import(
    name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
) -> Any:
    if name in _DEFERRED and globals and imports_deferred.held:
        answer = _stand_in(name, globals.get("__name__") or "", fromlist, level)
        if answer is not None:
            return answer
    return _real_import(name, globals, locals, fromlist, level)


def _install() -> None:
    global _real_import
    if _real_import is None and any(name not in sys.modules for name in _DEFERRED):
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


imports_deferred = OutermostScope(_install, _uninstall)
