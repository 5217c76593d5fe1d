"""The backward trace as `jit` runs it: the one the user sees, less the reshapes that change
nothing.

A linear's grad rule flattens its cotangent to 2-D and reshapes the result back, so on 2-D
inputs (a small program) a third of the backward's statements are reshapes to the shape the
tensor already has. Each returns a view with the same sizes and strides, which no statement of
a functional backward can tell from the tensor itself, so the compiled twin reads the tensor
instead, saving a dispatcher call each. A reshape whose result is a trace output (a gradient,
which autograd may keep as `.grad`) is kept: there the view and its base differ. Only the
backward is rewritten: the augmented forward's saved values are told apart by identity.
"""

from __future__ import annotations

from torch.utils import _pytree as pytree

from thunderviz.core.proxies import Proxy, TensorProxy, proxies_in
from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace

__all__ = ["without_identity_reshapes"]

_RESHAPES = frozenset(("aten.reshape.default", "aten.view.default"))


def _identity_reshape(bsym: BoundSymbol, outputs: set[str]) -> bool:
    if bsym.sym.id not in _RESHAPES or bsym.executes_subsymbols or not bsym.args:
        return False
    source, out = bsym.args[0], bsym.output
    return (
        isinstance(source, TensorProxy)
        and isinstance(out, TensorProxy)
        and out.name not in outputs
        and tuple(out.shape) == tuple(source.shape)
        and out.dtype == source.dtype
    )


def _reads_any(bsym: BoundSymbol, names: dict[str, Proxy]) -> bool:
    """Whether `bsym` or a subsymbol reads one of `names` (renaming one that does not is a
    copy of every bound symbol after the first dropped reshape: ~5 ms of HF GPT-2's backward)."""
    return any(p.name in names for b in bsym.walk() for p in proxies_in((b.args, b.kwargs), []))


def without_identity_reshapes(trace: Trace) -> Trace:
    """`trace` with each reshape or view to its input's own shape dropped and its result
    read from the input (the trace itself when there is none)."""
    outputs = {p.name for p in pytree.tree_leaves(trace.output) if isinstance(p, Proxy)}
    renames: dict[str, Proxy] = {}
    kept: list[BoundSymbol] = []
    for bsym in trace.bound_symbols:
        if renames and _reads_any(bsym, renames):
            bsym = bsym.rename(renames)
        if _identity_reshape(bsym, outputs):
            renames[bsym.output.name] = bsym.args[0]
        else:
            kept.append(bsym)
    if not renames:
        return trace
    return trace.from_trace(bound_symbols=kept)
