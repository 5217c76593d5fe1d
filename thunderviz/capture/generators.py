"""The random generators a program draws from and reseeds, as the trace replays them.

Eager code draws from three kinds of generator, and a trace run again must draw as it would:
- torch's default generators (`torch.rand(n)`, dropout): process state, printed as
  `generator=None`, which is the default one when the trace runs;
- a generator that outlives the call (`self.gen` of a module, one passed in): the trace
  captures the object and draws from it, so each run continues where the last left it, as
  eager's calls do;
- a generator the call made and dropped (`g = torch.Generator().manual_seed(0)` inside
  `forward`): eager makes it afresh on every call, so every call draws the same numbers. The
  trace holds a generator of its own and, first thing, sets it to the state the program's
  had when it first drew (a statement `generator.set_state(c0)`).
Which of the last two a generator is shows once the program has returned: one the call made
and dropped is gone once the program's returned frames let go of their locals (the recording
holds it weakly; `settle`).

`torch.manual_seed(s)`, `torch.seed()`, `torch.get_rng_state()` and
`torch.set_rng_state(state)` inside the program (and their `torch.random` and `torch.cuda`
twins; `fork_rng` is made of them) are statements of the trace, where the program called
them: each run reseeds, saves and restores there, as eager does, and a state the program
read is a value of the trace. They are looked up by name on `torch` when called, so
stand-ins of the recording's are in their place while any thread traces (torch's are put
back after), each recording the calls of its own thread's program. A reseed it cannot see
(a `manual_seed` imported by name before tracing, `torch.default_generator.manual_seed`)
changes `torch.initial_seed()`, and is refused: the trace could not replay it.

Tracing leaves every generator as it found it (`core/rng.py` for the default ones, `finish`
here for the others) and reports their state after the program, for a first run that takes
the recording's values (`executor/first_run.py`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import random
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

import torch

from thunderviz.capture.custom_function import ObjectProxy
from thunderviz.capture.errors import CaptureError
from thunderviz.capture.source import user_source
from thunderviz.capture.stamped_values import replaying
from thunderviz.core.symbol import BoundSymbol, Origin, Symbol, SymbolKind

__all__ = [
    "GeneratorProxy",
    "GeneratorUse",
    "PythonDraws",
    "StateCalls",
    "is_default_generator",
    "state_calls_recorded",
]


@dataclass(frozen=True, eq=False)
class GeneratorProxy(ObjectProxy):
    """A generator the program drew from, passed to the generated code by keyword."""


def is_default_generator(g: torch.Generator) -> bool:
    """One of torch's own: the CPU one, or a CUDA device's (which `generator=None` means)."""
    if g is torch.default_generator:
        return True
    if g.device.type == "cuda" and torch.cuda.is_initialized():
        return any(g is d for d in torch.cuda.default_generators)
    return False


_SET_STATE = Symbol(
    name="set_state",
    id="torch.Generator.set_state",
    fn=torch.Generator.set_state,
    kind=SymbolKind.METHOD,
)


@dataclass
class _Seen:
    generator: Callable[[], torch.Generator | None]  # a weak reference, or a strong one
    proxy: GeneratorProxy
    before: torch.Tensor  # its state when first seen, before it drew
    device: torch.device
    # the program's frames when it was first seen (returned once the program has), which
    # may hold it as a local (`settle`); none for a dispatcher's object
    frames: list[FrameType] | None = None

    def alive(self) -> torch.Generator | None:
        """The generator, if anything beyond this recording still holds it."""
        if isinstance(self.generator, _Counted) and not self.generator.held_elsewhere():
            return None
        return self.generator()


def _holding(g: torch.Generator) -> Callable[[], torch.Generator]:
    return lambda: g  # (made here: a closure in `proxy` would hold every `g` it is given)


class _Counted:
    """A strong reference to a generator that takes no weak one (torch 2.11's do not), which
    tells whether anything else holds it by its reference count: the count `held_elsewhere`
    reads for an object only this holds is measured once, the same way (below), so whatever
    the interpreter adds to a count read there is in both."""

    __slots__ = ("_g",)

    def __init__(self, g: Any) -> None:
        self._g = g

    def __call__(self) -> Any:
        return self._g

    def _count(self) -> int:
        return sys.getrefcount(self._g)

    def held_elsewhere(self) -> bool:
        return self._count() > _ONLY_COUNTED


_ONLY_COUNTED = _Counted(object())._count()


def _reference(g: torch.Generator) -> Callable[[], torch.Generator | None]:
    """A weak reference to `g`, where torch's generators take one."""
    try:
        return weakref.ref(g)
    except TypeError:
        return _Counted(g)


_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _program_frames() -> list[FrameType]:
    """The frames of the program's call running now, innermost first, up to the
    recording's own entry (capture/api.py runs the program)."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") != "thunderviz.capture.api":
        frames.append(frame)
        frame = frame.f_back
    return frames


class GeneratorUse:
    """The generators one recording has seen: their proxies and their states before.

    The dispatcher hands an ATen op a Python object of its own for the generator the
    torch-level call was given (`generator is g` is False there): one seen inside a call is
    that call's generator when their states agree. One that is no call's (an ATen op the
    program called itself) is held: the object dies, the generator it wraps lives on."""

    def __init__(self, claim: Callable[[str], str]) -> None:
        self._claim = claim
        self._seen: dict[int, _Seen] = {}  # by the id of the object seen
        self._pending: list[_Seen] = []  # first seen in the arguments of the coming call
        self._calls: list[list[_Seen]] = []  # per torch-level call running, its generators

    def proxy(self, g: torch.Generator) -> GeneratorProxy:
        """`g`'s proxy; its state is kept the first time it is seen, before it draws."""
        seen = self._seen.get(id(g))
        if seen is not None and seen.generator() is g:
            self._pending.append(seen)  # an argument of the coming call again
            return seen.proxy
        if self._calls:
            state = g.get_state()
            for owner in (s for call in reversed(self._calls) for s in call):
                held = owner.generator()
                if held is not None and torch.equal(held.get_state(), state):
                    return owner.proxy
            reference, frames = _holding(g), None  # no call's: held (the class docstring)
        else:
            reference, frames = _reference(g), _program_frames()
        proxy = GeneratorProxy(self._claim("generator"))
        seen = _Seen(reference, proxy, g.get_state(), g.device, frames)
        self._seen[id(g)] = seen
        self._pending.append(seen)
        return seen.proxy

    def enter_call(self) -> None:
        """A torch-level call begins, given the generators seen since the last one began."""
        self._calls.append(self._pending)
        self._pending = []

    def exit_call(self) -> None:
        self._calls.pop()

    def settle(self) -> None:
        """The program has returned: a generator it made for the call is one nothing holds
        now. Its frames may not be gone yet: they are kept until here (the first time each
        generator was seen), and a reference cycle may keep them longer (one frame caught in
        a cycle, as `torch.fx.wrap`'s own is on an import mid-trace, keeps every frame below it,
        and collection is paused while tracing). So the returned frames let go of their locals
        here (`frame.clear()`; a generator function's frame, which may only be suspended, is
        left as it is)."""
        frames = {id(f): f for s in self._seen.values() for f in s.frames or ()}
        for seen in self._seen.values():
            seen.frames = None
        for frame in frames.values():
            if not frame.f_code.co_flags & _SUSPENDABLE:
                with contextlib.suppress(RuntimeError):  # (one still running: none should be)
                    frame.clear()

    def persistent(self) -> list[torch.Generator]:
        """The generators seen that are still alive (the program did not make them for the
        call alone): an after-state for a first run from the recording is theirs."""
        alive = (s.alive() for s in self._seen.values())
        return [g for g in alive if g is not None]

    def finish(
        self, constants: dict[str, Any], make_state: Callable[[torch.Tensor], Any]
    ) -> list[BoundSymbol]:
        """The recording is over. A generator still alive becomes a captured object of the
        trace, set back to its state before the program; one the program made and dropped
        is replaced by the trace's own, set to its first state by the statements returned
        (for the trace's beginning). `make_state` binds a state tensor as a constant."""
        prelude = []
        # last seen first: should two objects stand for one generator (a dispatcher's wrapper
        # no call claimed), the state it is left in is the earlier one's, from before any draw
        for seen in reversed(self._seen.values()):
            g = seen.alive()
            if g is not None:
                g.set_state(seen.before)
                constants[seen.proxy.name] = g
                continue
            constants[seen.proxy.name] = torch.Generator(device=seen.device)
            state = make_state(seen.before)
            prelude.append(
                BoundSymbol(sym=_SET_STATE, args=(seen.proxy, state), kwargs={}, output=None)
            )
        return prelude[::-1]


# Where a program reads or sets the state of torch's own generators: looked up by name on
# these namespaces when called (`fork_rng` calls `torch.get_rng_state` and
# `torch.set_rng_state`; a program calls `torch.manual_seed`)
_STATE_CALLS = (
    *((torch, name) for name in ("manual_seed", "seed", "get_rng_state", "set_rng_state")),
    *((torch.random, name) for name in ("manual_seed", "seed", "get_rng_state", "set_rng_state")),
    *(
        (torch.cuda, name)
        for name in (
            "manual_seed", "manual_seed_all", "seed", "seed_all", "get_rng_state",
            "set_rng_state", "get_rng_state_all", "set_rng_state_all",
        )
    ),
)  # fmt: skip


class StateCalls(Protocol):
    """What `state_calls_recorded` needs of the recorder."""

    @property
    def module_path(self) -> str: ...

    def record_state_call(
        self, sym: Symbol, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, origin: Origin
    ) -> None: ...


@dataclass
class _Recording:
    recorder: StateCalls
    calls: int = 0  # state calls recorded
    inside: bool = False  # in one: the state calls it makes (`manual_seed`'s CUDA one) are its


# Torch's functions are replaced while any thread traces, and put back when the last one is
# done: a count under a lock, not each trace's own swap, which two threads tracing at once
# would interleave (the second keeping the first's stand-ins as "torch's", and putting them
# back for good). What is put back is what was there when the first began (a function the
# user wrapped stays wrapped), unless something else replaced a stand-in meanwhile. Each
# thread records into the innermost trace it runs.
_LOCK = threading.Lock()
_tracing = 0
_installed: list[tuple[Any, str, Callable[..., Any], Callable[..., Any]]] = []


class _Recordings(threading.local):
    """This thread's recordings, innermost last."""

    def __init__(self) -> None:
        self.stack: list[_Recording] = []


_local = _Recordings()


def _recording(space: Any, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """What stands in for torch's `space.name` while something traces."""
    sym = Symbol(name=f"{space.__name__}.{name}", id=f"{space.__name__}.{name}", fn=original)

    def call(*args: Any, **kwargs: Any) -> Any:
        stack = _local.stack
        if (
            not stack  # this thread traces nothing
            or stack[-1].inside
            or replaying()  # a stamped block: its copy records
            or sys._getframe(1).f_globals.get("__name__", "").startswith("thunderviz.")
        ):  # not the program's call
            return original(*args, **kwargs)
        recording = stack[-1]
        recording.calls += 1
        origin = Origin(user_source(skip=2), recording.recorder.module_path)
        recording.inside = True
        try:
            out = original(*args, **kwargs)
        finally:
            recording.inside = False
        recording.recorder.record_state_call(sym, args, kwargs, out, origin)
        return out

    functools.update_wrapper(call, original)
    return call


def _install() -> None:
    for space, name in _STATE_CALLS:
        original = getattr(space, name)
        stand_in = _recording(space, name, original)
        _installed.append((space, name, original, stand_in))
        setattr(space, name, stand_in)


def _uninstall() -> None:
    for space, name, original, stand_in in _installed:
        if getattr(space, name) is stand_in:
            setattr(space, name, original)
    _installed.clear()


@contextlib.contextmanager
def state_calls_recorded(recorder: StateCalls) -> Iterator[None]:
    """While the program runs: its calls that reseed torch's generators or read or set their
    state (`torch.manual_seed`, `torch.get_rng_state`, ... in the thread that traces) are
    statements of the trace, and run. A reseed made some other way is refused when the
    program ends (the module docstring)."""
    global _tracing
    with _LOCK:
        if _tracing == 0:
            _install()
        _tracing += 1
    recording = _Recording(recorder)
    stack = _local.stack
    stack.append(recording)
    initial = torch.initial_seed()
    try:
        yield
    finally:
        stack.pop()
        with _LOCK:
            _tracing -= 1
            if _tracing == 0:
                _uninstall()
    if not recording.calls and torch.initial_seed() != initial:
        raise CaptureError(
            f"the program reseeded torch's default generator (its seed went from {initial} to "
            f"{torch.initial_seed()}) other than through `torch.manual_seed(...)` or "
            "`torch.seed()`, which the trace records (a `manual_seed` imported by name, "
            "`torch.default_generator.manual_seed`): its replay would not reseed. Call "
            "`torch.manual_seed(...)` inside the program, or seed before calling it.",
            op="manual_seed",
            module_path=recorder.module_path,
        )


class PythonDraws:
    """Whether the program drew from Python's `random` or numpy's global generator: state a
    trace cannot replay (`random.random() < p` picks a branch, or a value baked in as a
    constant), so `jit` traces such a program on every call (executor/jit.py, the trace's
    `unreplayable`). Read as the generators' states before and after the program, so a draw
    through a name imported before tracing counts too."""

    def __init__(self) -> None:
        self._before = _python_states()

    def drawn(self) -> str:
        """Why the trace cannot replay the program's draws ("" when it drew none)."""
        python, numpy = _python_states()
        if python != self._before[0]:
            return "draws from Python's `random` module"
        if self._before[1] is None:  # numpy.random loaded by the program (or torch) just now:
            # as loaded, its generator is as a new one is, and has drawn nothing
            moved = numpy is not None and (numpy[0] != _fresh_position() or bool(numpy[2]))
        else:
            moved = numpy != self._before[1]
        return "draws from numpy's global generator" if moved else ""


@functools.cache
def _fresh_position() -> int:
    """Where in its state a new numpy RandomState's MT19937 is (as the global one is when
    numpy.random is first imported)."""
    return sys.modules["numpy.random"].RandomState().get_state(legacy=False)["state"]["pos"]


def _python_states() -> tuple[Any, Any]:
    np_random = sys.modules.get("numpy.random")
    numpy = None
    if np_random is not None:
        state = np_random.get_state(legacy=False)
        numpy = (state["state"]["pos"], state["state"]["key"].tobytes(), state["has_gauss"],
                 state["gauss"])  # fmt: skip
    return random.getstate(), numpy
