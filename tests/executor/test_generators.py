"""A jitted program draws what eager draws, call after call, whatever generator it uses and
however it reseeds (capture/generators.py).

Each program runs side by side with eager from the same generator states; every call's
output and gradients, and every generator's state after it (the global one, the module's,
one passed in), must be eager's. Before this, a module's own generator was replaced by the
global one from the second call on, a generator made inside `forward` kept drawing where
the trace left it, and `torch.manual_seed` inside the program ran only while tracing.
"""

from __future__ import annotations

import copy
import random
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import thunderviz as tv
from tests.helpers import DEVICES
from thunderviz.capture import generators

F64 = dict(dtype=torch.float64)


def _same_calls(
    eager: Callable[..., torch.Tensor],
    jitted: Callable[..., torch.Tensor],
    args: Callable[[], tuple[Any, ...]],
    generators: Callable[[], list[tuple[torch.Generator, torch.Generator]]] = list,
    calls: int = 4,
) -> None:
    """Calls `eager` and `jitted` in turn from the same global generator state; each call's
    output, the gradient of its inputs, and after it the global generator and each pair of
    `generators` (eager's, ours) must agree."""
    for call in range(calls):
        torch.manual_seed(100 + call)
        ours_in = args()
        out = jitted(*ours_in)
        out.sum().backward()
        after = _global_states()
        torch.manual_seed(100 + call)
        eager_in = args()
        want = eager(*eager_in)
        want.sum().backward()
        assert torch.equal(out, want), f"call {call}"
        for a, b in zip(ours_in, eager_in, strict=True):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                assert torch.equal(a.grad, b.grad), f"call {call}"
        for a, b in zip(after, _global_states(), strict=True):
            assert torch.equal(a, b), f"call {call}: the global generators"
        for ours, theirs in generators():
            assert torch.equal(ours.get_state(), theirs.get_state()), f"call {call}"


def _global_states() -> list[torch.Tensor]:
    """torch's own generators' states: the CPU's, and each GPU's where there is one."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return [torch.get_rng_state(), *cuda]


def _x(device: str = "cpu") -> tuple[torch.Tensor]:
    return (torch.randn(6, 5, **F64, device=device, requires_grad=True),)


@pytest.mark.parametrize("device", DEVICES)
def test_manual_seed_inside_the_program_reseeds_on_every_call(device):
    def program(x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(42)  # as a test, or a deterministic augmentation, does
        return F.dropout(x * 2, 0.5) + torch.rand(5, **F64, device=x.device)

    _same_calls(program, tv.jit(program), lambda: _x(device))
    assert "torch.manual_seed(42)" in str(tv.trace(program, *_x(device)))


def test_torch_seed_inside_the_program_reseeds_on_every_call():
    def program(x: torch.Tensor) -> torch.Tensor:
        torch.seed()  # a fresh nondeterministic seed, each call
        return F.dropout(x, 0.5)

    jitted = tv.jit(program)
    seeds = set()
    for _ in range(3):
        jitted(*_x())
        seeds.add(torch.initial_seed())
    assert len(seeds) == 3  # replayed: eager would reseed each call too


@pytest.mark.parametrize("device", DEVICES)
def test_fork_rng_inside_the_program_restores_the_state_on_every_call(device):
    """`fork_rng` saves the generator's state and restores it (on a GPU, through
    torch.cuda's state calls): the draws after it are the ones before it would have been,
    and the caller's stream goes on as if nothing drew."""

    def program(x: torch.Tensor) -> torch.Tensor:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            fixed = torch.rand(5, **F64, device=x.device)
        return x * fixed + F.dropout(x, 0.5)

    _same_calls(program, tv.jit(program), lambda: _x(device))


def test_a_state_read_and_set_back_inside_the_program_is_a_value_of_each_call():
    def program(x: torch.Tensor) -> torch.Tensor:
        state = torch.get_rng_state()
        first = F.dropout(x, 0.5)
        torch.set_rng_state(state)  # the same mask again, as eager draws it this call
        return first * F.dropout(x, 0.5)

    jitted = tv.jit(program)
    _same_calls(program, jitted, _x)
    assert "torch.get_rng_state()" in str(jitted.last.executed[0])


class Noisy(nn.Module):
    """Noise from a generator of the module's own (noise injection, a seeded augmentation)."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.fc = nn.Linear(5, 5)
        self.gen = torch.Generator(device).manual_seed(7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(x.shape, generator=self.gen, **F64, device=x.device)
        return F.dropout(self.fc(x) + noise, 0.3)  # and the global generator's dropout


@pytest.mark.parametrize("device", DEVICES)
def test_a_modules_own_generator_goes_on_drawing_as_in_eager(device):
    torch.manual_seed(0)
    eager = Noisy(device).double().to(device)
    ours = copy.deepcopy(eager)
    _same_calls(eager, tv.jit(ours), lambda: _x(device), lambda: [(ours.gen, eager.gen)])


class ManyDraws(nn.Module):
    """One generator drawn from by several kinds of op, some whose ATen kernel is handed the
    generator anew (randperm, multinomial, in-place draws), and a local one beside it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.gen = torch.Generator().manual_seed(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, g = self.fc(x), self.gen
        out = h[:, torch.randperm(6, generator=g)] * torch.empty(6, **F64).normal_(generator=g)
        out = out * torch.empty(6, **F64).bernoulli_(0.5, generator=g)
        out = out + torch.empty(6, **F64).exponential_(generator=g)
        picked = h[:, torch.multinomial(torch.ones(6, **F64), 3, generator=g)]
        local = torch.Generator().manual_seed(1)
        return out.sum(-1) + picked.sum(-1) + torch.randint(0, 6, (1,), generator=local)


def test_one_generator_drawn_from_by_many_kinds_of_op_goes_on_as_in_eager():
    torch.manual_seed(0)
    eager = ManyDraws().double()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    _same_calls(eager, jitted, _x6, lambda: [(ours.gen, eager.gen)])
    # the module's and the local one: a generator each, however many ops draw from it
    assert str(jitted.last.executed[0]).count("captured Generator object") == 2


def _x6() -> tuple[torch.Tensor]:
    return (torch.randn(3, 6, **F64, requires_grad=True),)


@pytest.mark.parametrize("device", DEVICES)
def test_a_generator_made_inside_the_program_draws_the_same_numbers_every_call(device):
    def program(x: torch.Tensor) -> torch.Tensor:
        g = torch.Generator(x.device).manual_seed(3)
        mask = torch.rand(x.shape, generator=g, **F64, device=x.device) > 0.5
        return torch.where(mask, x, -x) * torch.rand(1, generator=g, **F64, device=x.device)

    jitted = tv.jit(program)
    _same_calls(program, jitted, lambda: _x(device))
    # the trace sets a generator of its own to the state the program's had
    assert ".set_state(" in str(jitted.last.executed[0])


def test_a_generator_made_in_a_frame_a_reference_cycle_keeps_is_still_the_calls_own():
    """The frame outlives the call (it refers to itself, as `torch.fx.wrap`'s does when a
    lazy import runs mid-trace, and collection is paused while tracing), and with it the
    generator: being alive after the call does not make it the program's for good."""

    def program(x: torch.Tensor) -> torch.Tensor:
        me = sys._getframe()  # noqa: F841 - the frame holds itself: only a collection frees it
        g = torch.Generator().manual_seed(3)
        return x * torch.rand(x.shape, generator=g, **F64)

    _same_calls(program, tv.jit(program), _x)


def test_a_generator_passed_in_is_the_one_drawn_from():
    def program(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        return x * torch.rand(x.shape, generator=g, **F64)

    ours, theirs = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    jitted = tv.jit(program)
    _same_calls(
        lambda x: program(x, theirs), lambda x: jitted(x, ours), _x, lambda: [(ours, theirs)]
    )
    other_ours, other_theirs = torch.Generator().manual_seed(12), torch.Generator().manual_seed(12)
    _same_calls(
        lambda x: program(x, other_theirs),
        lambda x: jitted(x, other_ours),
        _x,
        lambda: [(other_ours, other_theirs), (ours, theirs)],
    )


def test_a_gradient_penalty_recomputes_with_the_modules_generator_where_it_was():
    """create_graph=True recomputes the forward (executor/double_backward.py): its draws
    must be the first run's, from every generator, and leave each where eager leaves it."""
    torch.manual_seed(0)
    eager = Noisy().double()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    for fn in (jitted, eager):
        torch.manual_seed(5)
        x = torch.randn(6, 5, **F64, requires_grad=True)
        (dx,) = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
        dx.square().sum().backward()
    for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-12, atol=1e-12, msg=name)
    assert torch.equal(ours.gen.get_state(), eager.gen.get_state())


def test_a_reseed_the_trace_cannot_see_is_refused_and_torch_is_left_as_it_was():
    def program(x: torch.Tensor) -> torch.Tensor:
        torch.default_generator.manual_seed(torch.initial_seed() + 1)
        return F.dropout(x, 0.5)

    names = ("manual_seed", "seed", "get_rng_state", "set_rng_state")
    originals = [getattr(space, n) for space in (torch, torch.random, torch.cuda) for n in names]
    with pytest.raises(tv.CaptureError, match="reseeded torch's default generator"):
        tv.jit(program)(*_x())
    assert [getattr(space, n) for space in (torch, torch.random, torch.cuda) for n in names] == (
        originals
    )


def _state_functions() -> list[Any]:
    names = ("manual_seed", "seed", "get_rng_state", "set_rng_state")
    return [getattr(space, n) for space in (torch, torch.random, torch.cuda) for n in names]


def test_a_reseed_is_one_statement_of_the_trace():
    """`torch.manual_seed` seeds CUDA through `torch.cuda.manual_seed_all`: that call is the
    reseed's own, not a second statement."""

    def program(x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(42)
        return x * torch.rand(5, **F64)

    text = str(tv.trace(program, *_x()))
    statements = [line.strip() for line in text.splitlines() if "manual_seed" in line]
    assert [s for s in statements if not s.startswith("#")] == ["torch.manual_seed(42)"], text


def test_two_threads_tracing_at_once_each_record_their_own_reseeds():
    """The stand-ins for torch's functions are shared while any thread traces; each thread's
    calls land in its own trace, and torch's functions are torch's once both are done."""
    import threading

    before = _state_functions()
    barrier = threading.Barrier(2)
    traces: dict[int, str] = {}

    def program(seed: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def run(x: torch.Tensor) -> torch.Tensor:
            barrier.wait(timeout=30)  # both traces are recording here
            torch.manual_seed(seed)
            barrier.wait(timeout=30)
            return x * torch.rand(5, **F64)

        return run

    def trace(seed: int) -> None:
        traces[seed] = str(tv.trace(program(seed), torch.randn(6, 5, **F64)))

    threads = [threading.Thread(target=trace, args=(s,)) for s in (1001, 2002)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert "torch.manual_seed(1001)" in traces[1001] and "2002" not in traces[1001]
    assert "torch.manual_seed(2002)" in traces[2002] and "1001" not in traces[2002]
    assert _state_functions() == before


def test_a_users_own_wrapper_of_manual_seed_stays_in_place(monkeypatch):
    calls = []
    original = torch.manual_seed

    def wrapped(seed: int) -> Any:
        calls.append(seed)
        return original(seed)

    monkeypatch.setattr(torch, "manual_seed", wrapped)

    def program(x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(9)
        return F.dropout(x, 0.5)

    _same_calls(program, tv.jit(program), _x, calls=2)
    assert torch.manual_seed is wrapped
    assert calls  # the wrapper ran, in the trace's replays as in eager


class OneLinear(nn.Module):
    """A module of one 5 -> 5 linear layer; the programs below differ in their forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 5)


class StochasticDepth(OneLinear):
    """A residual branch skipped at random with Python's own generator, and scaled by a draw
    from numpy's global one: values a trace can only bake in."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if random.random() < 0.5:
            return x * 1.0
        return x + self.fc(x) * float(np.random.rand())


def test_a_program_drawing_from_pythons_random_is_traced_on_every_call():
    torch.manual_seed(0)
    eager = StochasticDepth().double()
    jitted = tv.jit(copy.deepcopy(eager))
    taken = set()
    with pytest.warns(UserWarning, match="draws from Python's `random` module") as warned:
        for call in range(6):
            for fn in (jitted, eager):
                random.seed(call)
                np.random.seed(call)
                torch.manual_seed(call)
                x = torch.randn(6, 5, **F64, requires_grad=True)
                out = fn(x)
                out.sum().backward()
                drawn_after = (random.random(), float(np.random.rand()))
                if fn is jitted:
                    ours = (out.detach(), x.grad, drawn_after)
            assert torch.equal(ours[0], out.detach()) and torch.equal(ours[1], x.grad), call
            assert ours[2] == drawn_after, call  # both generators left where eager leaves them
            random.seed(call)
            taken.add(random.random() < 0.5)
    assert taken == {True, False}  # both branches were taken over the calls
    assert jitted.cache_misses == 6
    assert len([w for w in warned if "Python's `random`" in str(w.message)]) == 1


def test_a_program_that_draws_only_with_torch_is_traced_once():
    torch.manual_seed(0)
    jitted = tv.jit(Noisy().double())
    for _ in range(3):
        random.random()  # the caller's own draws between calls are not the program's
        jitted(*_x()).sum().backward()
    assert jitted.cache_misses == 1


class Rescaled(OneLinear):
    """Values taken to numpy and back as a number: the trace bakes the number in."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return h / float(np.abs(h.detach().numpy()).max())


def test_values_handed_to_numpy_are_traced_on_every_call():
    torch.manual_seed(0)
    eager = Rescaled().double()
    jitted = tv.jit(copy.deepcopy(eager))
    with pytest.warns(UserWarning, match=r"hands tensor values to numpy \(torch.Tensor.numpy\)"):
        for call in range(3):
            torch.manual_seed(call)
            x = torch.randn(6, 5, **F64)
            assert torch.equal(jitted(x), eager(x)), call
    assert jitted.cache_misses == 3
    assert "test_generators.py" in jitted.last_retrace_reason  # the line that did it


class Printing(OneLinear):
    """A `print` left in a forward while debugging: eager prints on every call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        print(f"mean {h.mean():.6f}", h.detach()[0])
        return h.tanh()


def test_a_print_of_tensor_values_prints_on_every_call(capsys):
    torch.manual_seed(0)
    eager = Printing().double()
    jitted = tv.jit(copy.deepcopy(eager))
    with pytest.warns(UserWarning, match="formats tensor values into a string"):
        for call in range(3):
            torch.manual_seed(call)
            x = torch.randn(6, 5, **F64)
            out = jitted(x)
            ours = capsys.readouterr().out
            assert torch.equal(out, eager(x)), call
            assert ours and ours == capsys.readouterr().out, call  # what eager printed
    assert jitted.cache_misses == 3


_FRESH_PROCESS = """
import sys, warnings
import torch
import thunderviz as tv
assert "numpy.random" not in sys.modules
warnings.simplefilter("error")


def loads(x):
    import numpy.random  # noqa: F401 - loaded mid-trace, as torch's own imports do
    return x * 2


def draws(x):
    import numpy.random
    return x * float(numpy.random.rand())


jitted = tv.jit(loads)
for _ in range(3):
    jitted(torch.ones(3))
assert jitted.cache_misses == 1, jitted.cache_misses
jitted = tv.jit(draws)
warnings.simplefilter("ignore")
for _ in range(3):
    jitted(torch.ones(3))
assert jitted.cache_misses == 3, jitted.cache_misses
print("ok")
"""


def test_numpys_generator_loaded_mid_trace_counts_as_drawn_only_if_it_drew():
    """In a fresh process numpy.random is not loaded: a trace that loads it (torch imports it
    on a first decomposition) has no state from before to compare with, and the generator's
    state as loaded stands in for it."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_generators_that_take_no_weak_reference_are_told_kept_or_dropped(monkeypatch):
    """torch 2.11's generators take no weak reference (seen on a GPU machine): whether the
    program kept one or dropped it is then read off its reference count. A module's own
    generator goes on drawing; one made and dropped inside starts again each call."""

    def no_weak_references(obj: object) -> None:
        raise TypeError(f"cannot create weak reference to {type(obj).__name__!r} object")

    monkeypatch.setattr(generators, "weakref", types.SimpleNamespace(ref=no_weak_references))
    torch.manual_seed(0)
    eager = Noisy().double()
    ours = copy.deepcopy(eager)
    _same_calls(eager, tv.jit(ours), _x, lambda: [(ours.gen, eager.gen)])

    def program(x: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(3)
        return x * torch.rand(x.shape, generator=g, **F64)

    jitted = tv.jit(program)
    _same_calls(program, jitted, _x)
    assert ".set_state(" in str(jitted.last.executed[0])  # the trace's own generator
