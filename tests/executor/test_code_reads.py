"""Globals the program's code reads, wherever it reads them (the jitted forward, a
submodule's forward, a method it calls on self, a helper function two calls down), are
snapshotted: changing one retraces, and the result is eager's. Compared with eager."""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
import types

import pytest
import torch
import torch.nn as nn

import thunderviz as tv

SCALE = 2.0
SHIFT = 1.0
USE_TANH = True


def _shifted(x):
    return _deeper(x) + SHIFT


def _deeper(x):
    return torch.tanh(x) if USE_TANH else torch.sigmoid(x)


class Inner(nn.Module):
    def forward(self, x):
        return self._scaled(x)

    def _scaled(self, x):
        return x * SCALE


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return _shifted(self.inner(x)).sum()


def test_globals_read_below_the_jitted_forward_retrace_when_they_change():
    global SCALE, SHIFT, USE_TANH
    saved = SCALE, SHIFT, USE_TANH
    model, x = Outer(), torch.randn(4, dtype=torch.float64)
    jitted = tv.jit(model)
    try:
        for change in (
            lambda: None,
            lambda: globals().update(SCALE=3.0),  # a submodule's method
            lambda: globals().update(SHIFT=-1.0),  # a helper the forward calls
            lambda: globals().update(USE_TANH=False),  # a helper's helper
        ):
            change()
            for _ in range(2):
                torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
        assert jitted.cache_misses == 4
    finally:
        SCALE, SHIFT, USE_TANH = saved


# --- what else the code reads: tensors, defaults, class attributes, a replaced forward ------

MASK = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
WEIGHTS = (2.0, 3.0)


def masked(x):
    return (x * MASK * WEIGHTS[0]).sum()


def with_default(x, options={"scale": 2.0}):  # noqa: B006 - the default is what is tested
    return (x * options["scale"]).sum()


class ClassScaled(nn.Module):
    scale = 2.0  # read through self: the class's value unless an instance shadows it

    def forward(self, x):
        return (x * self.scale).sum()


def _agree(jitted, eager, x):
    torch.testing.assert_close(jitted(x), eager(x), rtol=0, atol=0)


def test_a_global_tensor_or_tuple_rebound_retraces():
    global MASK, WEIGHTS
    x = torch.randn(3, dtype=torch.float64)
    jitted = tv.jit(masked)
    saved = MASK, WEIGHTS
    try:
        _agree(jitted, masked, x)
        MASK = torch.ones(3, dtype=torch.float64)  # rebound: the trace held the old tensor
        _agree(jitted, masked, x)
        WEIGHTS = (5.0, 3.0)
        _agree(jitted, masked, x)
        MASK.mul_(4.0)  # in place: the trace reads it by reference, nothing to retrace
        _agree(jitted, masked, x)
    finally:
        MASK, WEIGHTS = saved
    assert jitted.cache_misses == 3


def test_a_default_argument_changed_in_place_retraces():
    x = torch.randn(3, dtype=torch.float64)
    jitted = tv.jit(with_default)
    defaults = with_default.__defaults__[0]
    try:
        _agree(jitted, with_default, x)
        defaults["scale"] = 4.0
        _agree(jitted, with_default, x)
    finally:
        defaults["scale"] = 2.0
    assert jitted.cache_misses == 2


def test_a_class_attribute_changed_or_shadowed_and_a_replaced_forward_retrace():
    x = torch.randn(3, dtype=torch.float64)
    model = ClassScaled()
    jitted = tv.jit(model)
    try:
        _agree(jitted, model, x)
        ClassScaled.scale = 3.0
        _agree(jitted, model, x)
        model.scale = 5.0  # the instance's own, shadowing the class's
        _agree(jitted, model, x)
        model.forward = lambda x: (x + 100.0).sum()
        _agree(jitted, model, x)
    finally:
        ClassScaled.scale = 2.0
    assert jitted.cache_misses == 4


# --- a function the module holds, given to its constructor ----------------------------------

GAIN = [1.0]


class WithCallable(nn.Module):
    """`self.act` is a lambda from outside (an activation passed in): what it reads is the
    program's configuration as much as what a method reads."""

    def __init__(self, act) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2, dtype=torch.float64)
        self.act = act

    def forward(self, x):
        return self.act(self.lin(x))


def test_what_a_function_held_by_the_module_reads_retraces_when_it_changes():
    model, x = (
        WithCallable(lambda y: torch.tanh(y) * GAIN[0]),
        torch.randn(4, 3, dtype=torch.float64),
    )
    jitted = tv.jit(model)
    try:
        for change in (
            lambda: None,
            lambda: GAIN.__setitem__(0, 3.0),  # a global list it reads, changed in place
            lambda: setattr(model, "act", lambda y: torch.sigmoid(y)),  # another function
        ):
            change()
            for _ in range(2):
                torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
        assert jitted.cache_misses == 3
    finally:
        GAIN[0] = 1.0


def _gained(y, k=1.0):
    return torch.tanh(y) * GAIN[0] * k


class Gain:
    """A callable object passed in as the activation."""

    def __call__(self, y):
        return y * GAIN[0]


BOUND = functools.partial(_gained, k=2.0)


class GlobalPartial(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2, dtype=torch.float64)

    def forward(self, x):
        return BOUND(self.lin(x))


@pytest.mark.parametrize(
    "make",
    [
        lambda: WithCallable(functools.partial(_gained, k=2.0)),
        lambda: WithCallable(Gain()),
        GlobalPartial,
    ],
    ids=["partial held", "callable object held", "global partial"],
)
def test_what_a_partial_or_callable_object_runs_reads_retraces_when_it_changes(make):
    global BOUND
    model, x = make(), torch.randn(4, 3, dtype=torch.float64)
    jitted = tv.jit(model)
    saved = BOUND
    try:
        for change in (
            lambda: None,
            lambda: GAIN.__setitem__(0, 3.0),  # what the code it runs reads
            lambda: BOUND.keywords.__setitem__("k", 5.0),  # a global partial's arguments
            lambda: globals().update(BOUND=functools.partial(_gained, k=0.5)),  # rebound
        ):
            change()
            for _ in range(2):
                torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
    finally:
        GAIN[0] = 1.0
        BOUND = saved
        BOUND.keywords["k"] = 2.0


# --- settings objects the code reads attributes of ------------------------------------------

ARGS = argparse.Namespace(scale=1.0, act="tanh")  # a script's parsed command line
OPTIONS = types.SimpleNamespace(scale=1.0)


class Settings:
    scale = 1.0  # a class attribute an instance may shadow


SETTINGS = Settings()
ACTIVATIONS = [lambda y: torch.tanh(y) * GAIN[0]]


def _act(y):
    return torch.tanh(y) if ARGS.act == "tanh" else torch.sigmoid(y)


READS = {
    "argparse Namespace": (
        lambda y: _act(y) * ARGS.scale,
        [lambda: setattr(ARGS, "scale", 2.0), lambda: setattr(ARGS, "act", "sigmoid")],
    ),
    "SimpleNamespace": (lambda y: y * OPTIONS.scale, [lambda: setattr(OPTIONS, "scale", 3.0)]),
    "object shadowing its class": (
        lambda y: y * SETTINGS.scale,
        [
            lambda: setattr(SETTINGS, "scale", 3.0),  # shadows the class's
            lambda: (setattr(Settings, "scale", 4.0), vars(SETTINGS).pop("scale")),  # unshadows
        ],
    ),
    "class attribute": (lambda y: y * Settings.scale, [lambda: setattr(Settings, "scale", 5.0)]),
    "functions in a list": (lambda y: ACTIVATIONS[0](y), [lambda: GAIN.__setitem__(0, 2.0)]),
}


@pytest.mark.parametrize("case", READS)
def test_settings_the_code_reads_of_an_object_retrace_when_they_change(case):
    read, changes = READS[case]
    saved = vars(ARGS).copy(), vars(OPTIONS).copy(), vars(SETTINGS).copy(), Settings.scale
    model, x = WithCallable(read), torch.randn(4, 3, dtype=torch.float64)
    jitted = tv.jit(model)
    try:
        for change in [lambda: None, *changes]:
            change()
            for _ in range(2):
                torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
        assert jitted.cache_misses == 1 + len(changes)
    finally:
        vars(ARGS).update(saved[0])
        vars(OPTIONS).update(saved[1])
        vars(SETTINGS).clear()
        vars(SETTINGS).update(saved[2])
        Settings.scale = saved[3]
        GAIN[0] = 1.0


def test_a_config_module_of_the_programs_own_is_read_as_settings(tmp_path, monkeypatch):
    """`import config; x * config.SCALE`: a module next to the script, not a library."""
    (tmp_path / "tv_test_config.py").write_text("SCALE = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = importlib.import_module("tv_test_config")
    model = WithCallable(lambda y: y * config.SCALE)
    x = torch.randn(4, 3, dtype=torch.float64)
    jitted = tv.jit(model)
    try:
        for scale in (1.0, 2.0, 2.0, 3.0):
            config.SCALE = scale
            torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
        assert jitted.cache_misses == 3
    finally:
        sys.modules.pop("tv_test_config", None)


# --- code the call's arguments bring ------------------------------------------------------
FACTOR = [2.0]


class Schedule:
    base = 1.0  # a class attribute the methods read

    def scale(self):
        return self._mult() * 2

    def _mult(self):
        return Schedule.base + FACTOR[0]


class Config:
    factor = 3.0  # read as `cfg.factor` by the forward


class Holder:
    def __init__(self) -> None:
        self.act = lambda y: torch.tanh(y) * FACTOR[0]  # a function the object holds


class Scaler:
    def __call__(self, y):
        return y * FACTOR[0]


def _times(y, k):
    return y * k * FACTOR[0]


class TakesSettings(nn.Module):
    """Calls, or reads, what it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3, dtype=torch.float64)

    def forward(self, x, given):
        y = self.lin(x)
        if callable(given):
            return given(y)
        if isinstance(given, Schedule):
            return y * given.scale()
        if isinstance(given, Holder):
            return given.act(y)
        return y * given.factor


PASSED = {
    "a function": (lambda y: y * FACTOR[0], lambda: FACTOR.__setitem__(0, 5.0)),
    "a partial": (functools.partial(_times, k=2.0), lambda: FACTOR.__setitem__(0, 5.0)),
    "a callable object": (Scaler(), lambda: FACTOR.__setitem__(0, 5.0)),
    "an object's method calling another": (Schedule(), lambda: FACTOR.__setitem__(0, 5.0)),
    "an object's method reading its class": (Schedule(), lambda: setattr(Schedule, "base", 4.0)),
    "an object's class attribute": (Config(), lambda: setattr(Config, "factor", 7.0)),
    "a function an object holds": (Holder(), lambda: FACTOR.__setitem__(0, 5.0)),
}


@pytest.mark.parametrize("case", PASSED)
def test_code_and_settings_an_argument_brings_retrace_when_what_they_read_changes(case):
    """The same object passed on every call, so its key never changes: what its code reads
    (a global, its class's attribute) must be snapshotted, or the first trace is kept."""
    given, change = PASSED[case]
    model, x = TakesSettings(), torch.randn(4, 3, dtype=torch.float64)
    jitted = tv.jit(model)
    try:
        for step in (lambda: None, change):
            step()
            for _ in range(2):
                torch.testing.assert_close(jitted(x, given), model(x, given), rtol=0, atol=0)
        assert jitted.cache_misses == 2
    finally:
        FACTOR[0], Schedule.base, Config.factor = 2.0, 1.0, 3.0


def rescale(y):  # a global function that shares its name with a module's method
    return y


class SharesAName(nn.Module):
    def forward(self, x):
        return self.rescale(x)

    def rescale(self, x):
        return x * FACTOR[0]


def test_a_method_is_followed_where_a_global_shares_its_name():
    """`self.rescale(x)` looks up the name `rescale`, which this module's globals also hold:
    the method's reads are the program's all the same."""
    model, x = SharesAName(), torch.randn(4, dtype=torch.float64)
    jitted = tv.jit(model)
    try:
        for factor in (2.0, 5.0):
            FACTOR[0] = factor
            torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
        assert jitted.cache_misses == 2
    finally:
        FACTOR[0] = 2.0
