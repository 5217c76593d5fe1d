"""All built-in grad rules, one op family a file, put together here in one explicit place."""

from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules import (
    arithmetic,
    attention,
    casts,
    collectives,
    complex_numbers,
    composite,
    custom_function,
    distances,
    elementwise,
    fft,
    grouped,
    indexed_reductions,
    linalg,
    linalg_factor,
    linalg_solve,
    masked,
    nn,
    nn_kernels,
    recurrent,
    reductions,
    scans,
    selection,
    shape,
    special,
    strided,
)

BUILTIN_RULES = RuleSet.merged(
    "builtin",
    [elementwise.RULES, arithmetic.RULES, selection.RULES, casts.RULES, reductions.RULES,
     shape.RULES, strided.RULES, linalg.RULES, nn.RULES, attention.RULES, recurrent.RULES,
     masked.RULES, grouped.RULES, collectives.RULES, custom_function.RULES, special.RULES,
     composite.RULES, scans.RULES, distances.RULES, indexed_reductions.RULES, linalg_solve.RULES,
     linalg_factor.RULES, fft.RULES, nn_kernels.RULES, complex_numbers.RULES],
)

__all__ = ["BUILTIN_RULES"]
