"""Errors from differentiation, naming the op, the user's line and the module."""

from __future__ import annotations

from thunderviz.core.locations import where
from thunderviz.core.symbol import BoundSymbol

__all__ = ["AutodiffError"]


class AutodiffError(RuntimeError):
    def __init__(self, message: str, *, bsym: BoundSymbol | None = None) -> None:
        super().__init__(message)
        self.bsym = bsym

    @classmethod
    def no_rule(cls, bsym: BoundSymbol, top: BoundSymbol) -> AutodiffError:
        loc = where(top.source or bsym.source, top.module_path or bsym.module_path)
        inside = f" (inside {top.sym.id})" if top is not bsym else ""
        return cls(
            f"thunderviz cannot differentiate {bsym.sym.id}{inside} at {loc}: it has no grad "
            "rule and no decomposition into ops that have one. Register a rule with "
            f"@thunderviz.register_grad({bsym.sym.id!r}) (see README: 'Add a grad rule'), or "
            "compute this under torch.no_grad() / on detached tensors if it needs no gradient.",
            bsym=bsym,
        )

    @classmethod
    def complex_unsupported(cls, bsym: BoundSymbol, top: BoundSymbol) -> AutodiffError:
        loc = where(top.source or bsym.source, top.module_path or bsym.module_path)
        inside = f" (inside {top.sym.id})" if top is not bsym else ""
        loc = loc if loc.startswith("at ") else f"at {loc}"
        return cls(
            f"thunderviz cannot differentiate {bsym.sym.id}{inside} {loc} for complex "
            "tensors: its grad rule is written for real numbers and would give a wrong "
            "gradient. Compute it on real tensors (torch.view_as_real), under "
            "torch.no_grad() / on detached tensors if it needs no gradient, or register a "
            f"rule checked for complex inputs with @thunderviz.register_grad({bsym.sym.id!r}, "
            "supports_complex=True).",
            bsym=bsym,
        )
