"""OpInfo samples from torch's own test suite, as (fn, args, kwargs) cases for grad checks.

`op_db` is torch's independent list of ops with sample inputs; using it means our rules are
tested on inputs we did not choose (broadcasting, 0-dim tensors, odd dims, keepdim, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db


def opinfo(name: str, variant: str = "") -> Any:
    found = [o for o in op_db if o.name == name and o.variant_test_name == variant]
    if not found:
        raise LookupError(f"no OpInfo named {name!r} (variant {variant!r})")
    return found[0]


def samples(
    name: str, variant: str = "", *, dtype: torch.dtype = torch.float64, limit: int = 12
) -> Iterator[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """Up to `limit` (fn, args, kwargs) cases of OpInfo `name`, with float64 tensors."""
    info = opinfo(name, variant)
    for i, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
        if i >= limit:
            break
        yield info.op, (sample.input, *sample.args), dict(sample.kwargs)


def sample_params(names: list[str | tuple[str, str]], limit: int = 12) -> list[Any]:
    """pytest.param cases for `@pytest.mark.parametrize("fn,args,kwargs", ...)`."""
    out = []
    for entry in names:
        name, variant = entry if isinstance(entry, tuple) else (entry, "")
        for i, (fn, args, kwargs) in enumerate(samples(name, variant, limit=limit)):
            label = f"{name}.{variant}" if variant else name
            out.append(pytest.param(fn, args, kwargs, id=f"{label}-{i}"))
    return out
