"""All built-in grad rules, one op family a file, put together here in one explicit place."""

from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules import elementwise, linalg, reductions, shape

BUILTIN_RULES = RuleSet.merged(
    "builtin", [elementwise.RULES, reductions.RULES, shape.RULES, linalg.RULES]
)

__all__ = ["BUILTIN_RULES"]
