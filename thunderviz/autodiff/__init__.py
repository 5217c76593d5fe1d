"""Autodiff: grad rules, the reverse sweep over traces, and the forward/backward split."""

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import GradRule, RuleSet
from thunderviz.autodiff.rules import BUILTIN_RULES
from thunderviz.autodiff.saved import SavedTensor
from thunderviz.autodiff.vjp import AutodiffResult, autodiff

__all__ = [
    "AutodiffError",
    "AutodiffResult",
    "BUILTIN_RULES",
    "GradRule",
    "RuleSet",
    "SavedTensor",
    "autodiff",
    "get_grad",
    "put_grad",
    "requires_grad",
]
