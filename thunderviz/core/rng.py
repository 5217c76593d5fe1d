"""The global random number generators, left as they were found.

Tracing and debugging run the user's program (or its trace) again, and dropout or
`torch.randn` inside it draw from torch's global generators. Inside `preserved_rng()` they
draw from the state the user left, exactly as the program would have, and afterwards the
user's generators are back where they were: running thunderviz does not change what the
user's next random draw is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["preserved_rng"]


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Restore the CPU generator and, when CUDA is in use, every CUDA device's generator."""
    cpu = torch.random.get_rng_state()
    cuda = (
        torch.cuda.get_rng_state_all()
        if torch.cuda.is_available() and torch.cuda.is_initialized()
        else None
    )
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
