"""The scope every entry point holds while thunderviz traces, differentiates, compiles and
first runs a program: Python's cyclic garbage collector paused (`core/collection.py`) and
torch._dynamo's import deferred (`core/dynamo_import.py`). One scope, so that no entry point
holds one without the other; both nest, and end with the outermost."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from thunderviz.core.collection import collection_paused
from thunderviz.core.dynamo_import import dynamo_import_deferred

__all__ = ["working"]


@contextlib.contextmanager
def working() -> Iterator[None]:
    with collection_paused(), dynamo_import_deferred():
        yield
