"""Recording what a transform does, one visited bound symbol at a time.

Every transform takes an optional `recorder`. When given, it reports each visit: which bound
symbol, what the visitor answered, what was inserted and removed, and the bound symbols as
they stand after that step. The transform stepper in the UI replays exactly this.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace

__all__ = [
    "VISIT_TYPE",
    "TransformStep",
    "TransformRun",
    "StepRecorder",
    "Transform",
    "record_transform",
]


class VISIT_TYPE(enum.Enum):
    """What a visitor did with the bound symbol it was shown."""

    INSERT_AFTER = "INSERT_AFTER"  # keep it; what the visitor recorded goes after it
    INSERT_BEFORE = "INSERT_BEFORE"  # keep it; what the visitor recorded goes before it
    REPLACE = "REPLACE"  # what the visitor recorded stands in its place
    NO_OP = "NO_OP"  # keep it as it is; anything recorded is dropped
    REMOVE = "REMOVE"  # drop it (DCE's answer for what nothing reads)


@dataclass
class TransformStep:
    index: int
    visited: BoundSymbol | None
    visited_index: int | None  # position of `visited` in the trace the transform started from
    visit_type: VISIT_TYPE
    inserted: list[BoundSymbol] = field(default_factory=list)
    removed: list[BoundSymbol] = field(default_factory=list)
    bound_symbols: list[BoundSymbol] = field(default_factory=list)  # the trace after this step


@dataclass
class TransformRun:
    name: str
    before: Trace
    after: Trace | None = None
    steps: list[TransformStep] = field(default_factory=list)

    def trace_at(self, step: int) -> Trace:
        """The trace as it stood after step `step` (-1: before the first)."""
        if step < 0:
            return self.before
        return self.before.from_trace(bound_symbols=list(self.steps[step].bound_symbols))


class StepRecorder:
    """Collects TransformSteps; transforms call `step(...)` once per visit."""

    def __init__(self, name: str, before: Trace) -> None:
        self.run = TransformRun(name, before)
        self._index_of = {id(b): i for i, b in enumerate(before.bound_symbols)}

    def step(
        self,
        visited: BoundSymbol | None,
        visit_type: VISIT_TYPE,
        bound_symbols: Sequence[BoundSymbol],
        inserted: Sequence[BoundSymbol] = (),
        removed: Sequence[BoundSymbol] = (),
    ) -> None:
        self.run.steps.append(
            TransformStep(
                index=len(self.run.steps),
                visited=visited,
                visited_index=self._index_of.get(id(visited)) if visited is not None else None,
                visit_type=visit_type,
                inserted=list(inserted),
                removed=list(removed),
                bound_symbols=list(bound_symbols),
            )
        )


class Transform(Protocol):
    """A pass over traces: returns a new trace (with its provenance), never edits its input."""

    name: str

    def __call__(self, trace: Trace, *, recorder: StepRecorder | None = None) -> Trace: ...


def record_transform(transform: Transform, trace: Trace) -> TransformRun:
    """Run `transform` on `trace`, recording every step (for the transform stepper)."""
    recorder = StepRecorder(getattr(transform, "name", type(transform).__name__), trace)
    recorder.run.after = transform(trace, recorder=recorder)
    return recorder.run
