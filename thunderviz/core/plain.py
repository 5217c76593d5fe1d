"""The values thunderviz takes as they are: they hold no tensor, cannot change and compare by
value, so a guard keys on them by value, a recording keeps them in its key and a walk over
arguments passes them without a look inside. One owner, so that those three agree."""

from __future__ import annotations

import torch

__all__ = ["PLAIN", "SCALARS"]

# Python's numbers, strings and None
SCALARS = frozenset({int, float, bool, str, type(None)})
# ... and torch's descriptions of a tensor (`x.dtype`, `x.device`, `x.layout`)
PLAIN = SCALARS | {torch.dtype, torch.device, torch.layout}
