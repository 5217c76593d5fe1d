"""A scope that nests and that threads may hold at once, with work done only as the first
holder enters and as the last leaves: what pausing the garbage collector
(core/collection.py) and deferring torch's lazy imports (core/deferred_imports.py) both need."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["OutermostScope"]


class OutermostScope:
    """Call it for a context manager: `begin()` runs when nothing holds the scope yet,
    `end()` when its last holder leaves, both under one lock."""

    def __init__(self, begin: Callable[[], None], end: Callable[[], None]) -> None:
        self._begin, self._end = begin, end
        self._lock = threading.Lock()
        self._depth = 0  # holders now, in every thread

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._begin()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._end()

    @property
    def held(self) -> bool:
        return self._depth > 0
