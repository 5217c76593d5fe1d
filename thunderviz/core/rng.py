"""The global random number generators, left as they were found.

Tracing and debugging run the user's program (or its trace) again, and dropout or
`torch.randn` inside it draw from torch's global generators. Inside `preserved_rng()` they
draw from the state the user left, exactly as the program would have, and afterwards the
user's generators are back where they were: running thunderviz does not change what the
user's next random draw is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

__all__ = ["RngState", "generators_of", "preserved_rng"]


class RngState:
    """The CPU generator's state and, when CUDA is in use, every CUDA device's; and those of
    `generators`, generators of the program's own (capture/generators.py)."""

    def __init__(self, generators: Sequence[torch.Generator] = ()) -> None:
        self.cpu = torch.random.get_rng_state()
        self.cuda = (
            torch.cuda.get_rng_state_all()
            if torch.cuda.is_available() and torch.cuda.is_initialized()
            else None
        )
        self.own = [(g, g.get_state()) for g in generators]

    def same_as(self, other: RngState) -> bool:
        """Whether the generators were in the same state in both (nothing drew in between)."""
        if not torch.equal(self.cpu, other.cpu):
            return False
        if len(self.own) != len(other.own) or not all(
            g is h and torch.equal(a, b) for (g, a), (h, b) in zip(self.own, other.own, strict=True)
        ):
            return False
        if self.cuda is None or other.cuda is None:
            return self.cuda is other.cuda
        return all(torch.equal(a, b) for a, b in zip(self.cuda, other.cuda, strict=True))

    def restore(self) -> None:
        torch.random.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        for g, state in self.own:
            g.set_state(state)


@contextlib.contextmanager
def preserved_rng(generators: Sequence[torch.Generator] = ()) -> Iterator[None]:
    """Restore the generators' states when the block ends: torch's, and `generators` (a
    trace's own, `generators_of`)."""
    state = RngState(generators)
    try:
        yield
    finally:
        state.restore()


def generators_of(constants: dict[str, Any]) -> list[torch.Generator]:
    """The generators among a trace's captured objects: those the program draws from
    (capture/generators.py), which a run of the trace advances."""
    return [g for g in constants.values() if isinstance(g, torch.Generator)]
