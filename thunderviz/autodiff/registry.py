"""Grad rules: how each op differentiates, kept in plain tables keyed by symbol id.

A rule comes in one of two forms, both one decorated function:

* a **joint** rule (`RuleSet.grad`): the forward computation written with prims, then
  `get_grad(out)` for the cotangent of an output and `put_grad(x, g)` for the gradient of an
  input. Everything the rule computes before its first `get_grad` is forward code; what it
  reads of that in backward becomes saved-for-backward.
* an **augmented forward / backward** pair (`RuleSet.augmented_forward` +
  `RuleSet.backward`): the forward returns `(outputs, residuals)` and the backward takes
  `(*residuals, *cotangents)` and returns one gradient per positional argument.

Ops whose outputs carry no gradient are listed with `RuleSet.nondifferentiable`.

Complex tensors: a rule is used on them only where it says `supports_complex` (checked
against torch's derivatives.yaml: conjugates where torch conjugates); the sweep refuses any
other rule a complex tensor reaches, naming the op and the line, so that a rule written for
real numbers never gives a complex input a wrong gradient. A RuleSet gives its rules a
default (`RuleSet("shape", supports_complex=True)` for a family of linear maps); a rule
overrides it (`@RULES.grad(op, supports_complex=False)`).
Rule files each fill a RuleSet of their own; `rules/__init__.py` puts them together in one
explicit place, and users add theirs with `thunderviz.register_grad`. Rules that many ops
share in shape come from the makers in `rules/common.py` (`unary`, `backward_kernel`,
`with_arguments`, ...), each of which registers into the RuleSet it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.core.symbol import BoundSymbol, Symbol
from thunderviz.prims.aten import op_id
from thunderviz.prims.torch_symbols import torch_symbol

__all__ = ["GradRule", "RuleSet", "symbol_id"]

JointFn = Callable[..., Any]


def symbol_id(op: Any) -> str:
    """The registry key of an ATen overload, a Symbol, a torch function or an id string."""
    if isinstance(op, str):
        return op
    if isinstance(op, Symbol):
        return op.id
    if isinstance(op, torch._ops.OpOverload):
        return op_id(op)
    if isinstance(op, torch._ops.OpOverloadPacket):
        raise TypeError(
            f"register a rule for one overload of {op} (e.g. {op}.default), not the packet"
        )
    sym = torch_symbol(op) if callable(op) else None  # a torch-level function
    if sym is None:
        raise TypeError(
            f"cannot key a grad rule on {op!r}: pass an ATen overload, a Symbol, "
            "a public torch function or a symbol id string"
        )
    return sym.id


@dataclass(frozen=True)
class GradRule:
    """`joint` is None for ops that are not differentiable. `applies`, when given, says
    whether the rule handles a given call; where it does not, the call is differentiated
    through its subsymbols (an attention call with dropout: through the ops that draw the
    mask, as eager ran them)."""

    op_id: str
    joint: JointFn | None
    origin: str  # "joint", "augmented_forward/backward", "nondifferentiable"
    applies: Callable[[BoundSymbol], bool] | None = None
    supports_complex: bool = False  # checked against torch's rule for complex inputs

    @property
    def differentiable(self) -> bool:
        return self.joint is not None

    def refuses_complex(self, bsym: BoundSymbol) -> bool:
        """Whether this rule would see a complex tensor in `bsym` without supporting it."""
        return (
            self.differentiable
            and not self.supports_complex
            and any(p.dtype.is_complex for p in (*bsym.flat_tensor_args, *bsym.flat_tensor_outs))
        )

    def applies_to(self, bsym: BoundSymbol) -> bool:
        return self.applies is None or self.applies(bsym)


@dataclass
class RuleSet:
    """A table of rules. Later sets win when several are merged (user rules come last)."""

    name: str
    supports_complex: bool = False  # the default of this set's rules
    rules: dict[str, GradRule] = field(default_factory=dict)
    _aug: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def grad(
        self,
        *ops: Any,
        applies: Callable[[BoundSymbol], bool] | None = None,
        supports_complex: bool | None = None,
    ) -> Callable[[JointFn], JointFn]:
        complex_ok = self.supports_complex if supports_complex is None else supports_complex

        def register(fn: JointFn) -> JointFn:
            for op in ops:
                key = symbol_id(op)
                self.rules[key] = GradRule(key, fn, "joint", applies, complex_ok)
            return fn

        return register

    def augmented_forward(self, *ops: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            for op in ops:
                self._aug[symbol_id(op)] = fn
            return fn

        return register

    def backward(
        self, *ops: Any, supports_complex: bool | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        complex_ok = self.supports_complex if supports_complex is None else supports_complex

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            for op in ops:
                key = symbol_id(op)
                aug = self._aug.get(key)
                if aug is None:
                    raise ValueError(f"register the augmented forward of {key} before its backward")
                self.rules[key] = GradRule(
                    key,
                    _joint_from_pair(aug, fn),
                    "augmented_forward/backward",
                    supports_complex=complex_ok,
                )
            return fn

        return register

    def nondifferentiable(self, *ops: Any) -> None:
        for op in ops:
            key = symbol_id(op)
            self.rules[key] = GradRule(key, None, "nondifferentiable")

    def get(self, op_id: str) -> GradRule | None:
        return self.rules.get(op_id)

    def __contains__(self, op_id: str) -> bool:
        return op_id in self.rules

    def __len__(self) -> int:
        return len(self.rules)

    @staticmethod
    def merged(name: str, sets: Iterable[RuleSet]) -> RuleSet:
        out = RuleSet(name)
        for s in sets:
            out.rules.update(s.rules)
        return out


def _joint_from_pair(aug: Callable[..., Any], bwd: Callable[..., Any]) -> JointFn:
    """Run an augmented-forward/backward pair through the joint machinery."""

    def joint(*args: Any, **kwargs: Any) -> Any:
        out, residuals = aug(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        cotangents = [get_grad(o) for o in outs]
        grads = bwd(*residuals, *cotangents)
        grads = grads if isinstance(grads, tuple) else (grads,)
        for arg, g in zip(args, grads, strict=False):
            if g is not None:
                put_grad(arg, g)
        return out

    joint.__name__ = f"{aug.__name__}+{bwd.__name__}"
    return joint
