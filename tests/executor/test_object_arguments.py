"""Objects that are no tensors or numbers in a program: an options object a module holds
and a torch function takes (`nn.LinearCrossEntropyLoss(options=...)`). A trace passes it as a
captured constant (it has no literal to print), and `jit` traces again when the module is
given another one. Checked against eager."""

from __future__ import annotations

import dataclasses
import enum
import functools

import pytest
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


# --- mutable values the program reads: changed in place, the trace is made again --------


@dataclasses.dataclass
class Settings:
    scale: float = 2.0
    extra: bool = False


class _Plain:
    def __init__(self) -> None:
        self.k = 2.0


SKIP_GLOBAL = [1]
SETTINGS_GLOBAL = Settings()


class Configured(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(3))
        self.skip = [1]
        self.flags = {"scale": 2.0}
        self.config = Settings()
        self.plain = _Plain()
        self.act = torch.relu
        self.scaled = functools.partial(torch.mul, other=2.0)

    def forward(self, x):
        x = self.scaled(self.act(x))
        for i, layer in enumerate(self.layers):
            if i not in self.skip and i not in SKIP_GLOBAL:
                x = layer(x)
        x = x * self.flags["scale"] * self.config.scale * self.plain.k * SETTINGS_GLOBAL.scale
        return x + 1 if self.config.extra else x


def _set_global_settings(m):
    SETTINGS_GLOBAL.scale = 3.0


CHANGES = {
    "list_appended": lambda m: m.skip.append(0),
    "list_rebound": lambda m: setattr(m, "skip", [0, 2]),
    "dict_item": lambda m: m.flags.__setitem__("scale", 5.0),
    "dataclass_field": lambda m: setattr(m.config, "scale", 5.0),
    "dataclass_flag": lambda m: setattr(m.config, "extra", True),
    "plain_object": lambda m: setattr(m.plain, "k", 7.0),
    "function_rebound": lambda m: setattr(m, "act", torch.tanh),
    "partial_keyword": lambda m: m.scaled.keywords.__setitem__("other", 3.0),
    "global_list": lambda m: SKIP_GLOBAL.append(2),
    "global_dataclass": _set_global_settings,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_value_changed_in_place_traces_again(change):
    saved_skip, saved_scale = list(SKIP_GLOBAL), SETTINGS_GLOBAL.scale
    try:
        torch.manual_seed(0)
        m, x = Configured(), torch.randn(2, 3, requires_grad=True)
        jitted = tv.jit(m)
        torch.testing.assert_close(jitted(x), m(x), rtol=0, atol=0)
        CHANGES[change](m)
        torch.testing.assert_close(jitted(x), m(x), rtol=0, atol=0)
        assert jitted.cache_misses == 2
    finally:
        SKIP_GLOBAL[:] = saved_skip
        SETTINGS_GLOBAL.scale = saved_scale


def test_nothing_changed_traces_once():
    m, x = Configured(), torch.randn(2, 3)
    jitted = tv.jit(m)
    for _ in range(3):
        jitted(x)
    assert jitted.cache_misses == 1


def test_a_hugging_face_config_flag_traces_again():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=16)
    model = transformers.GPT2LMHeadModel(config).eval()
    idx = torch.randint(0, 50, (1, 8))
    jitted = tv.jit(model)
    with torch.no_grad():
        assert jitted(idx).hidden_states is None
        model.config.output_hidden_states = True
        got, want = jitted(idx), model(idx)
    assert len(got.hidden_states) == len(want.hidden_states)
    torch.testing.assert_close(got.hidden_states[-1], want.hidden_states[-1])
