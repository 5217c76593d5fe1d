"""The scope every entry point holds while thunderviz traces, differentiates, compiles and
first runs a program: Python's cyclic garbage collector paused (`core/collection.py`) and
torch's lazy imports of dynamo and sympy deferred (`core/deferred_imports.py`). One scope,
so that no entry point holds one without the other; both nest, and end with the
outermost."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from thunderviz.core.collection import collection_paused
from thunderviz.core.deferred_imports import imports_deferred

__all__ = ["working"]


@contextlib.contextmanager
def working() -> Iterator[None]:
    with collection_paused(), imports_deferred():
        yield
