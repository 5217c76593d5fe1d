"""All built-in grad rules, one op family a file, put together here in one explicit place."""

from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules import attention, elementwise, linalg, nn, reductions, shape

BUILTIN_RULES = RuleSet.merged(
    "builtin",
    [elementwise.RULES, reductions.RULES, shape.RULES, linalg.RULES, nn.RULES, attention.RULES],
)

__all__ = ["BUILTIN_RULES"]
