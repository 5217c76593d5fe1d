"""`thunderviz.jit` keys a call's non-tensor arguments by value: numbers by type and value,
containers and dataclasses by what they hold, a `functools.partial` by its function and
arguments, a small numpy array by its bytes; what it can compare neither way is refused by
name. Every result and gradient is compared with eager PyTorch on the same calls."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch

import thunderviz as tv
from tests.helpers import assert_same, value_and_grads

F64 = dict(dtype=torch.float64)


@dataclasses.dataclass
class Cfg:  # a mutable dataclass: unhashable, keyed by its fields
    scale: float
    shift: int = 0


class PlainCfg:  # hashed by identity: keyed by its attributes
    def __init__(self, scale: float) -> None:
        self.scale = scale


def scaled(x, cfg):
    return (x * cfg.scale + cfg.__dict__.get("shift", 0)).sin().sum()


def test_fresh_config_objects_each_get_their_own_result():
    x = torch.randn(3, 4, **F64, requires_grad=True)
    jitted = tv.jit(scaled, cache_size=64)
    for i in range(50):
        cfg = Cfg(scale=float(i))  # a fresh object each call; ids get reused
        assert_same(value_and_grads(jitted, x, cfg), value_and_grads(scaled, x, cfg))
    assert jitted.cache_misses == 50
    jitted(x, Cfg(scale=3.0))
    assert jitted.cache_misses == 50  # an equal config finds its trace


def test_a_config_mutated_in_place_retraces():
    x = torch.randn(3, 4, **F64, requires_grad=True)
    for cfg in (Cfg(scale=2.0), PlainCfg(scale=2.0)):
        jitted = tv.jit(scaled)
        assert_same(value_and_grads(jitted, x, cfg), value_and_grads(scaled, x, cfg))
        cfg.scale = 3.0
        assert_same(value_and_grads(jitted, x, cfg), value_and_grads(scaled, x, cfg))
        assert jitted.cache_misses == 2


def test_numbers_bools_and_containers_are_keyed_by_value_and_type():
    def f(x, k, opts):
        return x * k if opts["double"] else x + k

    x = torch.randn(3, **F64)
    jitted = tv.jit(f)
    for k, opts in [
        (2, {"double": True}),
        (2, {"double": False}),
        (True, {"double": True}),
        (2.0, {"double": True}),
        (3, {"double": True}),
    ]:
        torch.testing.assert_close(jitted(x, k, opts), f(x, k, opts), rtol=0, atol=0)
    assert jitted.cache_misses == 5


def test_an_argument_that_cannot_be_compared_is_refused_by_name():
    class Slotted:
        __slots__ = ("scale",)

        def __init__(self, scale):
            self.scale = scale

        __hash__ = None  # unhashable and without a __dict__ to compare

    jitted = tv.jit(lambda x, cfg: x * cfg.scale)
    with pytest.raises(TypeError, match=r"argument 1 of the call is a .*Slotted.*neither a tensor"):
        jitted(torch.ones(2), Slotted(2.0))


def test_a_partial_argument_is_keyed_by_its_function_and_arguments():
    def applied(x, fn):
        return fn(x).sum()

    x = torch.randn(3, 4, **F64, requires_grad=True)
    jitted = tv.jit(applied)
    calls = [
        functools.partial(torch.mul, other=2.0),
        functools.partial(torch.mul, other=3.0),  # another keyword: its empty __dict__ is equal
        functools.partial(torch.add, other=3.0),  # another function
        functools.partial(torch.mul, 3.0),  # an argument, not a keyword
        functools.partial(torch.mul, other=3.0),  # equal to the second
    ]
    for fn in calls:
        assert_same(value_and_grads(jitted, x, fn), value_and_grads(applied, x, fn))
    assert jitted.cache_misses == 4


def test_an_object_holding_state_outside_its_dict_is_refused():
    class Failure(Exception):  # `args` lives in the exception's C fields, not its __dict__
        pass

    jitted = tv.jit(lambda x, e: x * e.args[0])
    with pytest.raises(TypeError, match=r"argument 1 of the call is a .*Failure.*neither a tensor"):
        jitted(torch.ones(2), Failure(2.0))


def test_a_numpy_array_argument_is_keyed_by_its_values():
    def scaled_by(x, weights):
        return (x * torch.as_tensor(weights)).sin().sum()

    x = torch.randn(3, **F64, requires_grad=True)
    weights = np.array([1.0, 2.0, 3.0])
    jitted = tv.jit(scaled_by)
    for value in (1.0, 5.0, 1.0):
        weights[0] = value  # in place: the trace's constant is what the array held
        assert_same(value_and_grads(jitted, x, weights), value_and_grads(scaled_by, x, weights))
    assert jitted.cache_misses == 2
    with pytest.raises(TypeError, match=r"numpy array of 800000 bytes.*torch.from_numpy"):
        jitted(x, np.zeros(100_000))
