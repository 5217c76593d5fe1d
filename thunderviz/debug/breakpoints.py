"""Where the backward stepper stops: op targets, and the breakpoints as one value.

A breakpoint is checked on the step that just ran, so the values it produced can be
inspected right away (the viewer's offline stepper stops by the same rules). `Breakpoints`
reads and writes the viewer's form {ops, modules, nan_inf, grad_norm_above}.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.symbol import BoundSymbol
from thunderviz.debug.interpret import is_unpack
from thunderviz.debug.steps import StepRecord, module_within
from thunderviz.viz import protocol

__all__ = ["Breakpoints", "OpIndex", "OpSet", "OpTarget"]

# A backward bound symbol or its index, a forward bound symbol, or an op id ("backward:12",
# "forward:3").
OpTarget = BoundSymbol | int | str


@dataclass
class OpSet:
    """Backward steps by index, and forward ops (top level, by id) whose every backward step
    counts."""

    backward: set[int] = field(default_factory=set)
    forward: dict[int, BoundSymbol] = field(default_factory=dict)

    def __contains__(self, r: StepRecord) -> bool:
        return r.index in self.backward or (
            r.bsym.fwd_bsym is not None and id(r.bsym.fwd_bsym) in self.forward
        )


class OpIndex:
    """The ops of one program by position: what an op target names."""

    def __init__(self, result: AutodiffResult) -> None:
        self.backward = list(result.backward.bound_symbols)
        self.forward = list(result.forward.bound_symbols)
        self._backward_index = {id(b): i for i, b in enumerate(self.backward)}
        self._forward_index = {id(b): i for i, b in enumerate(self.forward)}
        self._forward_sub_top = {id(s): b for b in self.forward for s in b.walk()}

    def top_forward_of(self, bsym: BoundSymbol) -> BoundSymbol | None:
        """The top-level forward op `bsym` is (or lies inside); None if it is not one."""
        return self._forward_sub_top.get(id(bsym))

    def forward_id(self, bsym: BoundSymbol) -> str:
        return protocol.op_id("forward", self._forward_index[id(bsym)])

    def resolve(self, target: OpTarget) -> OpSet:
        if isinstance(target, bool):
            raise TypeError("a breakpoint target is a bound symbol, a backward index or an op id")
        if isinstance(target, int):
            if not 0 <= target < len(self.backward):
                raise IndexError(f"backward index {target} is outside 0..{len(self.backward) - 1}")
            return OpSet({target})
        if isinstance(target, str):
            parsed = protocol.parse_op_id(target)
            if parsed is None:
                raise ValueError(f"{target!r} is not an op id like 'backward:12' or 'forward:3'")
            kind, (top, *_) = parsed  # a subsymbol's id names its top-level op
            if kind == "backward":
                return self.resolve(top)
            if kind == "forward":
                if not 0 <= top < len(self.forward):
                    raise IndexError(f"{target!r}: the forward trace has {len(self.forward)} ops")
                return OpSet(forward={id(self.forward[top]): self.forward[top]})
            raise ValueError(f"breakpoints take backward or forward op ids, not {target!r}")
        if isinstance(target, BoundSymbol):
            if id(target) in self._backward_index:
                return OpSet({self._backward_index[id(target)]})
            top = self.top_forward_of(target)
            if top is not None:
                return OpSet(forward={id(top): top})
            if target.fwd_bsym is not None and id(target.fwd_bsym) in self._forward_index:
                return OpSet(forward={id(target.fwd_bsym): target.fwd_bsym})
            raise ValueError(f"{target!r} is neither in the backward nor in the forward trace")
        raise TypeError(f"cannot break on {target!r}: pass a BoundSymbol, an index or an op id")


class Breakpoints:
    """The breakpoints of one stepper: on ops, on entering modules, on NaN/Inf, on a norm."""

    def __init__(self, index: OpIndex) -> None:
        self.index = index
        self.ops = OpSet()
        self.modules: list[str] = []
        self.nan_inf = False
        self.grad_norm_above: float | None = None

    def on_op(self, target: OpTarget, enabled: bool = True) -> None:
        found = self.index.resolve(target)
        if enabled:
            self.ops.backward |= found.backward
            self.ops.forward.update(found.forward)
        else:
            self.ops.backward -= found.backward
            for k in found.forward:
                self.ops.forward.pop(k, None)

    def on_module(self, path: str, enabled: bool = True) -> None:
        if enabled and path not in self.modules:
            self.modules.append(path)
        elif not enabled and path in self.modules:
            self.modules.remove(path)

    def clear(self) -> None:
        self.ops = OpSet()
        self.modules.clear()
        self.nan_inf = False
        self.grad_norm_above = None

    def to_json(self) -> dict[str, Any]:
        ops = [protocol.op_id("backward", i) for i in sorted(self.ops.backward)]
        ops += [self.index.forward_id(b) for b in self.ops.forward.values()]
        return {
            "ops": ops,
            "modules": list(self.modules),
            "nan_inf": self.nan_inf,
            "grad_norm_above": self.grad_norm_above,
        }

    def load_json(self, spec: Mapping[str, Any]) -> None:
        """Replace all breakpoints from the viewer's form (see `to_json`)."""
        self.clear()
        for op in spec.get("ops", ()) or ():
            self.on_op(op)
        for path in spec.get("modules", ()) or ():
            if isinstance(path, str):  # a path, or its "module:<path>" id
                in_id = protocol.module_path_of(path)
                self.on_module(path if in_id is None else in_id)
        self.nan_inf = bool(spec.get("nan_inf", False))
        # a threshold that is not a finite number is off: JSON cannot carry inf or nan, and
        # no step's norm is ever above them
        norm = spec.get("grad_norm_above")
        if isinstance(norm, bool) or not isinstance(norm, int | float) or not math.isfinite(norm):
            norm = None
        self.grad_norm_above = None if norm is None else float(norm)

    def reason(self, r: StepRecord, previous_module: str | None) -> str | None:
        """Why the run stops after step `r` (None: it goes on). `previous_module`: the module
        of the step before it (None at the first step)."""
        if self.nan_inf and r.has_nan_or_inf:
            return "NaN/Inf in " + ", ".join(r.bad_outputs)
        if r in self.ops:
            return f"breakpoint on {r.op_id}"
        module = r.module_path
        for path in self.modules:
            if module_within(module, path) and not (
                previous_module is not None and module_within(previous_module, path)
            ):
                return f"breakpoint on module {path or '(root)'}"
        # the saved-tensor unpack is not a gradient and never fires a norm breakpoint
        if self.grad_norm_above is not None and not (is_unpack(r.bsym) and r.index == 0):
            if r.max_norm > self.grad_norm_above:
                return f"norm > {self.grad_norm_above:g}"
        return None
