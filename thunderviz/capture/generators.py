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
Which of the last two a generator is shows once the program has returned: only a generator
the call made and dropped is gone by then (the recording holds it weakly until then).

`torch.manual_seed(s)` and `torch.seed()` inside the program are statements of the trace,
where the program called them: each run reseeds there, as eager does. They are looked up as
`torch.manual_seed` when called, so the recording puts its own in their place while the
program runs in the thread that traces (and puts torch's back after). A reseed it cannot
see (a `manual_seed` imported by name before tracing, `torch.default_generator.manual_seed`)
changes `torch.initial_seed()`, and is refused: the trace could not replay it.

Tracing leaves every generator as it found it (`core/rng.py` for the default ones, `finish`
here for the others) and reports their state after the program, for a first run that takes
the recording's values (`executor/first_run.py`).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from thunderviz.capture.custom_function import ObjectProxy
from thunderviz.capture.errors import CaptureError
from thunderviz.capture.source import user_source
from thunderviz.capture.stamped_values import replaying
from thunderviz.core.symbol import BoundSymbol, Origin, Symbol, SymbolKind

__all__ = ["GeneratorProxy", "GeneratorUse", "reseeds_recorded", "is_default_generator"]


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
            return seen.proxy
        reference: Callable[[], torch.Generator | None] = weakref.ref(g)
        if self._calls:
            state = g.get_state()
            for owner in (s for call in reversed(self._calls) for s in call):
                held = owner.generator()
                if held is not None and torch.equal(held.get_state(), state):
                    return owner.proxy
            reference = lambda: g  # noqa: E731 - no call's: held (the class docstring)
        seen = _Seen(reference, GeneratorProxy(self._claim("generator")), g.get_state(), g.device)
        self._seen[id(g)] = seen
        self._pending.append(seen)
        return seen.proxy

    def enter_call(self) -> None:
        """A torch-level call begins, given the generators seen since the last one began."""
        self._calls.append(self._pending)
        self._pending = []

    def exit_call(self) -> None:
        self._calls.pop()

    def persistent(self) -> list[torch.Generator]:
        """The generators seen that are still alive (the program did not make them for the
        call alone): an after-state for a first run from the recording is theirs."""
        alive = (s.generator() for s in self._seen.values())
        return [g for g in alive if g is not None]

    def finish(
        self, constants: dict[str, Any], make_state: Callable[[torch.Tensor], Any]
    ) -> list[BoundSymbol]:
        """The recording is over. A generator still alive becomes a captured object of the
        trace, set back to its state before the program; one the program made and dropped
        is replaced by the trace's own, set to its first state by the statements returned
        (for the trace's beginning). `make_state` binds a state tensor as a constant."""
        prelude = []
        for seen in self._seen.values():
            g = seen.generator()
            if g is not None:
                g.set_state(seen.before)
                constants[seen.proxy.name] = g
                continue
            constants[seen.proxy.name] = torch.Generator(device=seen.device)
            state = make_state(seen.before)
            prelude.append(
                BoundSymbol(sym=_SET_STATE, args=(seen.proxy, state), kwargs={}, output=None)
            )
        return prelude


_SEEDING = ("manual_seed", "seed")


@contextlib.contextmanager
def reseeds_recorded(
    record: Callable[[BoundSymbol], None], module_path: Callable[[], str]
) -> Iterator[None]:
    """While the program runs: its `torch.manual_seed(s)` and `torch.seed()` calls (in the
    thread that traces) are recorded by `record` as statements, and run. A reseed made some
    other way is refused when the program ends (the module docstring)."""
    owner = threading.get_ident()
    originals = {name: getattr(torch.random, name) for name in _SEEDING}
    seen = [0]

    def recording(name: str) -> Callable[..., Any]:
        original = originals[name]

        def reseed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != owner or replaying():  # a stamped block: its copy
                return original(*args, **kwargs)
            seen[0] += 1
            sym = Symbol(name=f"torch.{name}", id=f"torch.{name}", fn=original)
            origin = Origin(user_source(skip=2), module_path())
            record(BoundSymbol(sym=sym, args=args, kwargs=kwargs, output=None, origin=origin))
            return original(*args, **kwargs)

        return reseed

    initial = torch.initial_seed()
    patched = {name: recording(name) for name in _SEEDING}
    for name, fn in patched.items():
        setattr(torch.random, name, fn)
        setattr(torch, name, fn)
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch.random, name, fn)
            setattr(torch, name, fn)
    if not seen[0] and torch.initial_seed() != initial:
        raise CaptureError(
            f"the program reseeded torch's default generator (its seed went from {initial} to "
            f"{torch.initial_seed()}) other than through `torch.manual_seed(...)` or "
            "`torch.seed()`, which the trace records (a `manual_seed` imported by name, "
            "`torch.default_generator.manual_seed`): its replay would not reseed. Call "
            "`torch.manual_seed(...)` inside the program, or seed before calling it.",
            op="manual_seed",
            source=None,
            module_path=module_path(),
        )
