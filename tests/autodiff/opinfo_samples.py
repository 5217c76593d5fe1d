"""OpInfo samples from torch's own test suite, as (fn, args, kwargs) cases for grad checks.

`op_db` is torch's independent list of ops with sample inputs; using it means our rules are
tested on inputs we did not choose (broadcasting, 0-dim tensors, odd dims, keepdim, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.testing._internal.common_utils as torch_test_utils
import torch.testing._internal.opinfo.core as opinfo_core
from torch.testing._internal.common_methods_invocations import op_db

from benchmarks import opinfo_census as census

# OpInfo.sample_inputs walks the whole Python stack (inspect.stack, reading source files)
# looking for a unittest.TestCase to take sample skips from; under pytest's collection that
# costs ~0.15 s an op. These tests are not unittest cases: there is nothing to find.
opinfo_core.extract_test_fn = torch_test_utils.extract_test_fn = lambda: None


# OpInfos torch dropped with their op, and the release that dropped them: their cases are
# left out from then on (any other name missing from op_db is an error, not a skip).
_REMOVED = {"cholesky": "2.14", "qr": "2.14"}


def in_this_torch(name: str) -> bool:
    """Whether the installed torch still has the OpInfo `name` (see `_REMOVED`)."""
    removed_in = _REMOVED.get(name)
    return removed_in is None or torch.__version__ < removed_in


def opinfo(name: str, variant: str = "") -> Any:
    found = [o for o in op_db if o.name == name and o.variant_test_name == variant]
    if not found:
        raise LookupError(f"no OpInfo named {name!r} (variant {variant!r})")
    return found[0]


def samples(
    name: str,
    variant: str = "",
    *,
    dtype: torch.dtype = torch.float64,
    limit: int = 12,
    processed: bool = False,
) -> Iterator[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """Up to `limit` (fn, args, kwargs) cases of OpInfo `name`, with float64 tensors.
    `processed=True`: fn applies the sample's `output_process_fn_grad` (the outputs torch's
    own gradient tests differentiate, e.g. without a permutation matrix output)."""
    info = opinfo(name, variant)
    for i, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
        if i >= limit:
            break
        fn = info.op
        if processed:
            fn = _processed(info.op, sample.output_process_fn_grad)
        yield fn, (sample.input, *sample.args), dict(sample.kwargs)


def _processed(op: Any, process: Any) -> Any:
    def fn(*args: Any, **kwargs: Any) -> Any:
        return process(op(*args, **kwargs))

    fn.__name__ = getattr(op, "__name__", "op")
    return fn


def sample_params(
    names: list[str | tuple[str, str]],
    limit: int = 12,
    *,
    spread: bool = False,
    skip: Any = None,
    processed: bool = False,
) -> list[Any]:
    """pytest.param cases for `@pytest.mark.parametrize("fn,args,kwargs", ...)`: up to
    `limit` samples per op, the first ones or (`spread=True`) picked evenly over its whole
    list (an op's first samples are often all alike); `skip(args, kwargs)` leaves cases out."""
    out = []
    for entry in names:
        name, variant = entry if isinstance(entry, tuple) else (entry, "")
        if not in_this_torch(name):
            continue
        cases = list(samples(name, variant, limit=10_000 if spread else limit, processed=processed))
        if spread:
            step = max(1.0, len(cases) / limit)
            picked = sorted({int(i * step) for i in range(min(limit, len(cases)))})
        else:
            picked = list(range(len(cases)))
        label = f"{name}.{variant}" if variant else name
        out += [
            pytest.param(*cases[i], id=f"{label}-{i}")
            for i in picked
            if skip is None or not skip(cases[i][1], cases[i][2])
        ]
    return out


def agrees_with_autograd(
    fn: Any, args: Any, kwargs: Any, dtype: torch.dtype = torch.complex128
) -> None:
    """thunderviz.vjp against torch.autograd with the same random cotangents (the OpInfo
    census's comparison: outputs and the gradient of every floating or complex input)."""
    problem = census.check_sample(fn, args, kwargs, dtype)
    assert problem is not None, "torch.autograd rejects this sample: pick another"
    assert problem == "", problem
