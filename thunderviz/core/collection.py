"""Python's cyclic garbage collector paused while a trace is built, differentiated and
compiled.

A first call makes tens of thousands of objects that live on (proxies, bound symbols, traces,
generated code). Every 700 allocations start a collection of the youngest objects, and every
so often, once enough objects have survived, one of the whole heap, which holds everything
torch (and transformers, a notebook) made: such a collection measured 0.29 s inside a 0.21 s
first call of the written-out GPT (the occasional 450-630 ms first calls), besides ~10 ms of
young collections per call. Paused, the objects made meanwhile are looked at by the first
collection after the pause, as they would have been by one during it; nothing is frozen and
no threshold is changed. Pauses nest (tracing inside autodiff's `vjp`) and threads trace at
once: the outermost pause to end re-enables collection, and only if it was enabled when the
first began, so a user's `gc.disable()` stays.
"""

from __future__ import annotations

import gc

from thunderviz.core.scopes import OutermostScope

__all__ = ["collection_paused"]

_was_enabled = False  # whether collection was enabled when the outermost pause began


def _pause() -> None:
    global _was_enabled
    _was_enabled = gc.isenabled()
    gc.disable()


def _resume() -> None:
    if _was_enabled:
        gc.enable()


collection_paused = OutermostScope(_pause, _resume)
