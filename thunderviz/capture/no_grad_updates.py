"""In-place updates of tensors that require grad that autograd does not see: under
`torch.no_grad()`, or through a detached alias of the tensor (`.data`, `.detach()`), grad
mode on or off.

    with torch.no_grad():
        self.weight.clamp_(-c, c)          # weight clipping in a forward
    F.embedding(x, w, max_norm=1.0)        # renormalises rows of w in place, under no_grad
    self.scale.data.copy_(new_scale)       # LSQ: its observer's estimate into a parameter

`weight` (`scale`) is still the leaf: later uses differentiate as to it, at its new value.
Recorded functionally, the update makes a new value that needs no gradient, and the
parameter would silently get none. So after such a call, capture records
`StraightThrough(old, new)`: the new value, whose gradient goes to the old one as it is (a
custom autograd Function, so the trace shows it and autodiff needs no rule of its own), and
the program's later reads of the tensor read that.

A torch function can make such an update inside itself: `F.gaussian_nll_loss` clones the
variance and clamps the clone to `eps` under no_grad, so the variance's gradient is taken at
the clamped value but never through the clamp. Inside a call only its ATen ops are seen, so
there the recorder reattaches after the in-place op itself (`Recorder.on_dispatch`), when
the no_grad was entered within the call (one entered outside is the call's to handle).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F

from thunderviz.capture.dispatch_mode import unrecorded
from thunderviz.capture.function_apply import read_through
from thunderviz.core.proxies import Proxy, TensorProxy

__all__ = [
    "MAX_NORM_LOOKUPS",
    "embedding_renorm_apart",
    "detached_alias_bases",
    "grad_requiring_args",
    "max_norm_embedding",
    "reattach_no_grad_updates",
]

# The lookups that renormalise the rows they read first, under no_grad (`max_norm=`)
MAX_NORM_LOOKUPS = {f: inspect.signature(f) for f in (F.embedding, F.embedding_bag)}


class StraightThrough(torch.autograd.Function):
    """The value of `new`; the gradient goes to `old` unchanged, as autograd, which never saw
    the update, sends it to the tensor itself."""

    @staticmethod
    def forward(ctx: Any, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        return new.view_as(new)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad_outputs[0], None


def grad_requiring_args(recorder: Any, args: Any) -> list[tuple[torch.Tensor, Proxy]]:
    """The call's tensor arguments whose values require grad, with their proxies now; for a
    view, its base too (`nn.init.constant_(w[0], c)` writes into `w`, which the program
    reads after: its gradient goes to `w`, through the row written too)."""
    found: dict[int, tuple[torch.Tensor, Proxy]] = {}
    for a in args:
        if not isinstance(a, torch.Tensor):
            continue
        view = recorder._views.get(id(a))
        for t in (a,) if view is None else (a, view.base):
            proxy = recorder._proxies.get(id(t))
            if isinstance(proxy, TensorProxy) and proxy.requires_grad:
                found.setdefault(id(t), (t, proxy))
    return list(found.values())


def detached_alias_bases(recorder: Any, args: Any) -> list[tuple[torch.Tensor, Proxy]]:
    """The tensors requiring grad that the call's tensor arguments are detached aliases of
    (`w.data`, `w.detach()`: views needing no gradient of a base that needs one), with the
    bases' proxies now."""
    found = []
    for a in args:
        view = recorder._views.get(id(a)) if isinstance(a, torch.Tensor) else None
        if view is None:
            continue
        proxy = recorder._proxies.get(id(a))
        base = recorder._proxies.get(id(view.base))
        if (
            isinstance(base, TensorProxy)
            and base.requires_grad
            and not getattr(proxy, "requires_grad", True)
        ):
            found.append((view.base, base))
    return found


def reattach_no_grad_updates(recorder: Any, before: list[tuple[torch.Tensor, Proxy]]) -> None:
    """After a call made under no_grad: each of `before` the call updated in place is read
    from here on through a `StraightThrough` of its old and new values."""
    for tensor, old in before:
        new = recorder._proxies.get(id(tensor))
        if new is None or new.name == old.name:
            continue  # not updated
        with unrecorded():
            alias = tensor.detach()  # the new value under a second name, for the call
        recorder.bind(alias, new)
        recorder.read_as(tensor, old)  # the call reads the old value, then the new
        read_through(recorder, tensor, StraightThrough, alias)


def max_norm_embedding(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The arguments of an `F.embedding` or `F.embedding_bag` call (defaults filled in) when
    it has a `max_norm`, else None."""
    call = MAX_NORM_LOOKUPS[func].bind(*args, **kwargs)
    call.apply_defaults()
    return call.arguments if call.arguments["max_norm"] is not None else None


def embedding_renorm_apart(recorder: Any, func: Any, a: dict[str, Any]) -> Any:
    """`F.embedding(..., max_norm=m)` or `F.embedding_bag(...)` (`func`, its arguments `a`)
    as the two calls it makes: the renormalisation of the looked-up rows of `weight` in
    place under no_grad, then the lookup. Made as two calls the recorder sees, the update
    gets its `StraightThrough` before the lookup reads `weight` (inside one call, the lookup
    would read a value that needs no gradient: the bag's weight got none)."""
    with recorder.function_mode:
        index = a["input"].contiguous()
        with torch.no_grad():
            torch.embedding_renorm_(a["weight"], index, a["max_norm"], a["norm_type"])
        return func(**{**a, "input": index, "max_norm": None})
