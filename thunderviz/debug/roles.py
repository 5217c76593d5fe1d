"""Who reads a gradient, and in which role: the backward trace indexed by the sweep log.

One backward proxy can be the gradient of several forward tensors at once (a rule that
passes its output's cotangent straight to an input), and an accumulation
`aten.add.Tensor(old, new)` reads the gradient of a tensor as `old`. To change the gradient
of one forward tensor — what a tensor hook does — exactly its reads have to change: the
rule of the op that produced the tensor (which asked for it with `get_grad`), the next
accumulation into it, and the final gradient when it is a forward argument. `Slot` names
one such read; `BackwardRoles.gradient_slots` finds them all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import NamedTuple

from thunderviz.autodiff.sweep_log import Contribution, RuleApplication
from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BoundSymbol

__all__ = ["Slot", "BackwardRoles"]


class Slot(NamedTuple):
    """One read of a gradient value.

    kind "read": backward step `step` reads `name` (any position); "old" / "grad": the
    accumulation at step `step` reads its old total / the new contribution; "final": the
    gradient returned for forward argument `name`.
    """

    kind: str
    step: int  # not `index`, which would hide tuple.index
    name: str


class BackwardRoles:
    """Structural facts about one `AutodiffResult`'s backward (computed once, no values)."""

    def __init__(self, result: AutodiffResult) -> None:
        self.result = result
        self.bsyms: list[BoundSymbol] = list(result.backward.bound_symbols)
        self.producer: dict[str, int] = {}
        self.readers: dict[str, list[int]] = defaultdict(list)
        for i, b in enumerate(self.bsyms):
            for p in b.flat_proxy_outs:
                self.producer.setdefault(p.name, i)
            for name in dict.fromkeys(p.name for p in b.flat_proxy_args):
                self.readers[name].append(i)
        self.applications: list[RuleApplication] = list(result.applications)
        self.app_of_output: dict[str, RuleApplication] = {}
        self.contributions_to: dict[str, list[Contribution]] = defaultdict(list)
        self.accumulation_at: dict[int, Contribution] = {}
        self.app_steps: dict[int, list[int]] = {}
        for app in self.applications:
            for out in app.read:
                self.app_of_output.setdefault(out, app)
            for c in app.contributions:
                self.contributions_to[c.x].append(c)
                if c.old is not None and c.total in self.producer:
                    self.accumulation_at[self.producer[c.total]] = c
            self.app_steps[id(app)] = sorted(
                {self.producer[n] for n in app.emitted if n in self.producer}
            )
        self.grad_input: dict[str, str] = {
            p.name: g.name
            for p, g in zip(result.forward.flat_args, result.grad_inputs, strict=True)
            if g is not None
        }
        # forward tensor name -> the forward bound symbol (any level) that produced it
        self.forward_producer: dict[str, BoundSymbol] = {}
        for top in result.forward.bound_symbols:
            for b in top.walk():
                for p in b.flat_proxy_outs:
                    self.forward_producer.setdefault(p.name, b)
            for p in top.flat_proxy_outs:
                self.forward_producer[p.name] = top
        self.forward_args = {p.name for p in result.forward.flat_args}

    def gradient_slots(
        self, x: str, held_in: str, _seen: set[tuple[str, str]] | None = None
    ) -> list[Slot]:
        """The reads of forward tensor `x`'s gradient while backward proxy `held_in` holds it
        (its accumulated value at that point)."""
        seen = _seen if _seen is not None else set()
        if (x, held_in) in seen:
            return []
        seen.add((x, held_in))
        slots: list[Slot] = []
        app = self.app_of_output.get(x)
        if app is not None and app.read.get(x) == held_in:
            for i in self.app_steps[id(app)]:
                if i not in self.accumulation_at and i in self.readers.get(held_in, ()):
                    slots.append(Slot("read", i, held_in))
            for c in app.contributions:
                if c.grad != held_in:
                    continue
                if c.old is None:  # passed straight through: the input's gradient is this one
                    slots += self.gradient_slots(c.x, held_in, seen)
                elif c.total in self.producer:
                    slots.append(Slot("grad", self.producer[c.total], c.grad))
        for c in self.contributions_to.get(x, ()):
            if c.old == held_in and c.total in self.producer:
                slots.append(Slot("old", self.producer[c.total], held_in))
        if self.grad_input.get(x) == held_in:
            slots.append(Slot("final", -1, x))
        return slots

    def module_contributions(
        self, within: Callable[[RuleApplication], bool]
    ) -> dict[str, list[Contribution]]:
        """Per forward tensor, the contributions made by the rule applications `within`
        accepts, in sweep order."""
        out: dict[str, list[Contribution]] = defaultdict(list)
        for app in self.applications:
            if within(app):
                for c in app.contributions:
                    out[c.x].append(c)
        return dict(out)

    def float_outputs(self, bsym: BoundSymbol) -> list[str]:
        return [p.name for p in bsym.flat_proxy_outs if isinstance(p, TensorProxy) and p.is_float]
