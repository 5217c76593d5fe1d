"""Objects that are no tensors or numbers in a program: an options object a module holds
and a torch function takes (`nn.LinearCrossEntropyLoss(options=...)`). A trace passes it as a
captured constant (it has no literal to print), and `jit` traces again when the module is
given another one. Checked against eager."""

from __future__ import annotations

import dataclasses
import enum

import torch

import thunderviz as tv


@dataclasses.dataclass(frozen=True)
class Options:
    scale: float
    shift: float = 0.0


class Mode(enum.Enum):
    DOUBLE = 2.0
    TRIPLE = 3.0


def apply_options(x, options):
    """A torch function (function modes see it as one call) taking an options object."""
    if torch.overrides.has_torch_function_unary(x):
        return torch.overrides.handle_torch_function(apply_options, (x,), x, options)
    return x * options.scale + options.shift


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.options = Options(2.0)
        self.mode = Mode.DOUBLE

    def forward(self, x):
        return apply_options(x, self.options) * self.mode.value


def test_an_options_argument_is_a_captured_constant():
    m, x = Scaled(), torch.randn(3)
    trace = tv.trace(m, x)
    assert any(v == m.options for v in trace.constants.values())
    torch.testing.assert_close(trace.python_callable()(x), m(x))
    with torch.no_grad():  # compiled as the forward trace is, printed first
        torch.testing.assert_close(tv.jit(m)(x), m(x))


def test_new_options_on_the_module_trace_again():
    m, x = Scaled(), torch.randn(3, requires_grad=True)
    jitted = tv.jit(m)
    for options, mode in [
        (Options(2.0), Mode.DOUBLE),
        (Options(5.0, 1.0), Mode.DOUBLE),
        (Options(5.0, 1.0), Mode.TRIPLE),
    ]:
        m.options, m.mode = options, mode
        torch.testing.assert_close(jitted(x), m(x), rtol=0, atol=0)
