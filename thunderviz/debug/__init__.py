"""The debugger: per-tensor statistics, a backward stepper with breakpoints, gradient flow,
comparison against torch.autograd, and the Session that ties them to a program."""

from thunderviz.debug.compare import Comparison, OpDifference, compare
from thunderviz.debug.grad_flow import GRAD_STATUSES, cotangent_map, grad_flow
from thunderviz.debug.gradcheck import GradCheck, GradientReport
from thunderviz.debug.interpret import StepError
from thunderviz.debug.interventions import GradEdit, Intervention
from thunderviz.debug.ledger import LEDGER_STATUSES, LedgerEntry, nan_ledger
from thunderviz.debug.reference import GradComparison, autograd_grads, trace_arg_values
from thunderviz.debug.session import Session
from thunderviz.debug.stats import TensorStats, tensor_stats
from thunderviz.debug.stepper import BackwardStepper
from thunderviz.debug.steps import StepRecord

__all__ = [
    "GRAD_STATUSES",
    "LEDGER_STATUSES",
    "GradCheck",
    "GradEdit",
    "GradientReport",
    "Intervention",
    "LedgerEntry",
    "nan_ledger",
    "BackwardStepper",
    "Comparison",
    "OpDifference",
    "compare",
    "GradComparison",
    "Session",
    "StepError",
    "StepRecord",
    "TensorStats",
    "autograd_grads",
    "cotangent_map",
    "grad_flow",
    "tensor_stats",
    "trace_arg_values",
]
