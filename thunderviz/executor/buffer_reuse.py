"""The compiled twin of a trace writes a pointwise op's result into its dead input.

A trace is functional: `relu(bn(x))` allocates the ReLU's output beside the BatchNorm's,
where eager code written `nn.ReLU(inplace=True)` overwrites it, and a ResNet's step paid
for that (~3% of eager's step on the benchmarks' ResNet-10, measured as eager with and
without `inplace=True`). Where a value dies at a pointwise op that reads no other tensor,
nothing can see its buffer again, and the op's in-place overload (`aten.relu_` for
`aten.relu`) computes the same values into it: the same kernel, the same bits.

The buffer may be reused only when no other tensor shares it, which the ops' schemas say:
- its producer is an ATen op whose schema returns it fresh (no alias annotation: not a
  view, not an input handed back), and not laid out by strides the program gave;
- every statement that reads it is an ATen op whose schema neither views nor writes that
  argument (no alias annotation on it), so no view of it can be alive elsewhere;
- the reading op is the last one (`core/liveness.py`), and the value is not an output (the
  augmented forward's outputs are the values saved for the backward);
- the op reads it and no other tensor, as its first argument, and returns one tensor of
  its shape and dtype: the same layout (an elementwise op keeps a dense input's strides),
  the same values. Ops that draw random numbers keep their own.

Only traces that run without grad are rewritten (the augmented forward and the backward):
under grad, autograd may have saved the buffer. The printed traces are unchanged; the
statements keep their places, so error attribution's line numbers stay those of the trace.
"""

from __future__ import annotations

import functools

import torch

from thunderviz.core.liveness import dying_names
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace
from thunderviz.prims.aten import aten_symbol

__all__ = ["reusing_dead_inputs"]

_OpOverload = torch._ops.OpOverload


def reusing_dead_inputs(trace: Trace) -> Trace:
    """`trace` with each pointwise op whose only tensor input dies there run in place on
    it, where nothing else can hold that buffer (the module docstring); `trace` itself when
    no statement qualifies."""
    bsyms = trace.bound_symbols
    ops = [_aten_op(b) for b in bsyms]
    producer: dict[str, tuple[int, int]] = {}  # name -> (statement, output index)
    unshared: dict[str, bool] = {}  # name -> no statement so far may view or write it
    for i, bsym in enumerate(bsyms):
        for name in {p.name for p in bsym.flat_proxy_args}:
            unshared[name] = unshared.get(name, True) and _reads_unaliased(ops[i], bsym, name)
        for k, p in enumerate(bsym.flat_outs):
            if isinstance(p, Proxy):
                producer[p.name] = (i, k)
    dying = dying_names(bsyms, trace.output)
    changed = list(bsyms)
    for i, bsym in enumerate(bsyms):
        inplace = _inplace_variant(ops[i])
        if inplace is None or not bsym.args or not isinstance(bsym.args[0], TensorProxy):
            continue
        x, out = bsym.args[0], bsym.output
        made = producer.get(x.name)  # None: an input of the trace
        if (
            made is not None
            and x.name in dying.get(i, ())
            and unshared.get(x.name, False)
            and _fresh(ops[made[0]], bsyms[made[0]], made[1])
            and isinstance(out, TensorProxy)
            and out.describes(x)
            and [p.name for p in bsym.flat_tensor_args] == [x.name]
        ):
            changed[i] = bsym.with_changes(sym=aten_symbol(inplace))
    if all(a is b for a, b in zip(changed, bsyms, strict=True)):
        return trace
    return trace.from_trace(bound_symbols=changed)


def _aten_op(bsym: BoundSymbol) -> _OpOverload | None:
    """The ATen overload a statement calls as its own (printed) call, when its schema tells
    the truth about aliasing; None for anything else (a torch-level call, a functionalized
    call whose subsymbols run, a guard)."""
    op = bsym.sym.fn
    if not isinstance(op, _OpOverload) or bsym.executes_subsymbols:
        return None
    return op if aten_symbol(op) is bsym.sym and _schema_tells_aliasing(op) else None


@functools.cache
def _schema_tells_aliasing(op: _OpOverload) -> bool:
    """An op with a kernel of its own returns new tensors where its schema says so. A
    CompositeImplicitAutograd one may hand its input back unannotated (`type_as` when the
    type already matches, `dropout` outside training): it is taken as sharing everything."""
    return not torch._C._dispatch_has_kernel_for_dispatch_key(
        op.name(), "CompositeImplicitAutograd"
    )


def _fresh(op: _OpOverload | None, bsym: BoundSymbol, index: int) -> bool:
    """Output `index` of `bsym` (which calls `op`, `_aten_op`'s) is a new tensor of its own,
    by the op's schema."""
    if op is None:
        return False
    returns = op._schema.returns
    if len(returns) != len(bsym.flat_outs):  # a list return: no one-to-one reading
        return False
    ret = returns[index]
    if any(a.name == "stride" for a in op._schema.arguments):
        return False  # `empty_strided` may be asked for overlapping memory (a 0 stride)
    return ret.alias_info is None and isinstance(ret.type, torch.TensorType)


def _reads_unaliased(op: _OpOverload | None, bsym: BoundSymbol, name: str) -> bool:
    """`bsym` reads the value `name` through arguments its schema neither views nor writes."""
    if op is None:
        return False
    schema = op._schema.arguments
    by_name = {a.name: a for a in schema}
    for j, arg in enumerate(bsym.args):
        if _holds(arg, name) and (j >= len(schema) or schema[j].alias_info is not None):
            return False
    for key, arg in bsym.kwargs.items():
        if _holds(arg, name) and (key not in by_name or by_name[key].alias_info is not None):
            return False
    return True


def _holds(arg: object, name: str) -> bool:
    if isinstance(arg, Proxy):
        return arg.name == name
    if isinstance(arg, tuple | list):
        return any(_holds(a, name) for a in arg)
    return False


@functools.cache
def _inplace_variant(op: _OpOverload | None) -> _OpOverload | None:
    """`aten.relu_.default` for `aten.relu.default`: the in-place overload of a pointwise op
    that takes the same arguments under the same names, writing into `self`; None when there
    is none (or the op draws random numbers)."""
    if op is None or op.namespace != "aten" or torch.Tag.pointwise not in op.tags:
        return None
    if torch.Tag.nondeterministic_seeded in op.tags:
        return None
    packet = getattr(torch.ops.aten, op._schema.name.split("::", 1)[1] + "_", None)
    inplace = getattr(packet, op._overloadname, None) if packet is not None else None
    if not isinstance(inplace, _OpOverload):
        return None
    ours, theirs = op._schema.arguments, inplace._schema.arguments
    if [(a.name, a.kwarg_only) for a in ours] != [(a.name, a.kwarg_only) for a in theirs]:
        return None
    self_info = theirs[0].alias_info if theirs else None
    return inplace if self_info is not None and self_info.is_write else None
