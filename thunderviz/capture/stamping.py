"""Block stamping: twelve identical transformer blocks recorded once, written out eleven times.

A model's repeated blocks (the items of a ModuleList or Sequential that share their class
with a sibling, and their parameters' and buffers' shapes with another block) record the
same ops each time, on other proxies. Once a block's recording is known for a *call
signature* (the block's class, training flag, grad and autocast modes, the structure,
metadata and aliasing of its inputs, its parameters' and buffers' metadata, and the values
of the attributes its forward read: capture/attribute_reads.py) a later call with the same
signature can be written out from that recording: the same bound symbols with fresh names
drawn from the trace's NameGenerator in the order the recording drew them, the block's own
parameters in place of the recorded block's, and module paths moved to the new block. With
fake tensors its outputs are new FakeTensors of the recorded metadata; with real tensors
(what `jit` traces) the block runs eagerly, outside the recorder's modes, for its outputs'
values (the same kernels the recorded run would have run: a fraction of recording them),
and a replay whose outputs do not match the recording's structure is undone (RNG state
included) and recorded for real.

A recording is used only after it proved itself: two consecutive real recordings of one
signature must agree exactly once written out for each other. The recorder's per-trace
caches (decompositions) draw names on their first fill that the trace never uses: a first
recording that did so proves the second when it agrees with it without those names and the
second used every name it drew (it filled nothing, so the next one sees the same caches). Any block
that could record differently is recorded for real: one with hooks, one that reads a
tensor from outside its inputs and parameters, creates constants, mutates its inputs,
reads values, returns a view, takes a non-primitive Python object
(a KV cache), sets an attribute, or runs inside another recorded call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree

from thunderviz.capture.attribute_reads import (
    attributes_of,
    autocast_state,
    current_values,
    hook_free,
    module_globals,
    reading_attributes,
)
from thunderviz.capture.dispatch_mode import unrecorded
from thunderviz.capture.repeated_blocks import repeated_blocks
from thunderviz.capture.rewriting import WrittenOut, drawn_since, fingerprints, rewritten
from thunderviz.capture.stamped_values import AtenOps, replayed
from thunderviz.core.plain import PLAIN
from thunderviz.core.proxies import NumberProxy, Proxy
from thunderviz.core.symbol import BoundSymbol, BsymTag

__all__ = ["stamping_blocks"]

_PRIMITIVES = PLAIN


@dataclass
class _Recording:
    """One real recording of a block, in the terms needed to write it out again."""

    bsyms: list[BoundSymbol]
    inputs: list[Proxy]  # proxies of the tensor inputs, in leaf order
    state: dict[str, Proxy]  # the block's parameters and buffers by relative name
    generated: list[str]  # fresh names the recording drew, in order
    proxies: dict[str, Proxy]  # generated name -> proxy
    out_spec: Any
    out_leaves: list[Any]  # non-tensors as they are; tensors as ("in", i) / ("new", proxy, meta)
    path: str  # the block's module path
    reads: dict[tuple[str, str], Any]  # the attributes its forward read, and their values
    module_globals: Any = None  # the globals of its modules' forward code, as it ran
    # its ATen ops, to match a real trace's eager run with (False: none to match), made when
    # a trace first wants the values inside (`aten_ops`)
    ops: AtenOps | Literal[False] | None = None

    def aten_ops(self) -> AtenOps | None:
        """Its ATen ops (`AtenOps.of`), worked out once; None where they cannot be matched."""
        if self.ops is None:
            self.ops = AtenOps.of(self.bsyms) or False
        return self.ops or None

    @property
    def has_new_outputs(self) -> bool:
        return any(isinstance(x, tuple) and x and x[0] == "new" for x in self.out_leaves)


@dataclass
class _Call:
    """What one call of a block brings: its tensor inputs' proxies, its state's proxies."""

    inputs: list[Proxy]
    input_tensors: list[torch.Tensor]
    state: dict[str, Proxy]
    path: str
    block: torch.nn.Module


_MISMATCH = object()  # a replay whose outputs are not shaped as the recording's


@contextlib.contextmanager
def stamping_blocks(
    recorder: Any, module: torch.nn.Module | None, fake: bool
) -> Iterator[list[WrittenOut]]:
    """While tracing `module`, write repeated blocks out from a proven recording instead of
    recording them. Blocks' `forward` is shadowed on the instance for the duration, and
    restored after. Yields the list of blocks written out, filled as the trace runs."""
    blocks = repeated_blocks(module) if module is not None else []
    stamper = _Stamper(recorder, fake)
    patched = []
    try:
        for block in blocks:
            block.forward = stamper.forward_of(block)
            patched.append(block)
        yield stamper.written_out
    finally:
        for block in patched:
            del block.forward


class _Stamper:
    def __init__(self, recorder: Any, fake: bool) -> None:
        self.recorder = recorder
        self.fake = fake
        self.candidates: dict[Any, _Recording] = {}
        self.proven: dict[Any, list[_Recording]] = {}
        self.refused: set[Any] = set()
        self.owner = threading.get_ident()
        self.written_out: list[WrittenOut] = []  # proven recordings and their write-outs

    def forward_of(self, block: torch.nn.Module) -> Any:
        original = type(block).forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self.owner:  # another thread's call: not traced here
                return original(block, *args, **kwargs)
            with torch._C.DisableTorchFunction():  # metadata reads: not for the recorder
                key_and_call = self._key(block, args, kwargs)
            if key_and_call is None:
                return original(block, *args, **kwargs)
            key, call = key_and_call
            proven_here = self.proven.get(key, ())
            globals_now = module_globals(block) if proven_here else None
            for proven in proven_here:
                if proven.module_globals == globals_now and current_values(block, proven.reads):
                    # every tensor read in there is ours, not the program's: under the
                    # recorder's function mode each would cost a handler call (~1-8 µs)
                    with torch._C.DisableTorchFunction():
                        out = self._stamp(proven, call, lambda: original(block, *args, **kwargs))
                    if out is not _MISMATCH:
                        return out
                    break
            if key in self.refused:
                return original(block, *args, **kwargs)
            return self._record(key, call, original, block, args, kwargs)

        return forward

    # --- the call signature -----------------------------------------------------------
    def _key(self, block: torch.nn.Module, args: Any, kwargs: Any) -> tuple[Any, _Call] | None:
        rec = self.recorder
        if len(rec._frames) != 1 or rec._device_override is not None or not hook_free(block):
            return None
        path = rec.module_path
        leaves, spec = pytree.tree_flatten((args, kwargs))
        sig: list[Any] = [
            type(block),
            block.training,
            torch.is_grad_enabled(),
            autocast_state(),
            spec,
        ]
        inputs, tensors = [], []
        first: dict[int, int] = {}
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                proxy = self._bound(leaf)
                if proxy is None:
                    return None
                sig.append(_tensor_sig(leaf, proxy, first.setdefault(id(leaf), len(first))))
                inputs.append(proxy)
                tensors.append(leaf)
            elif type(leaf) in _PRIMITIVES:
                sig.append((type(leaf), repr(leaf)))
            else:
                return None  # a Python object the block may read or change (a KV cache)
        state = {}
        for name, t in [
            *block.named_parameters(remove_duplicate=False),
            *block.named_buffers(remove_duplicate=False),
        ]:
            proxy = self._bound(t)
            if proxy is None:
                return None
            sig.append((name, _tensor_sig(t, proxy, first.setdefault(id(t), len(first)))))
            state[name] = proxy
        if not tensors and not state:
            return None  # no fake tensor to make its outputs' fake tensors with
        return tuple(sig), _Call(inputs, tensors, state, path, block)

    def _bound(self, t: torch.Tensor) -> Proxy | None:
        """The proxy of a tensor the recorder knows (a FakeTensor in a fake trace, a plain
        tensor in a real one), not a view it would re-derive."""
        rec = self.recorder
        if not (isinstance(t, FakeTensor) if self.fake else type(t) is torch.Tensor):
            return None
        info = rec._views.get(id(t))
        if info is not None and info.version != rec._versions.get(id(info.base), 0):
            return None
        return rec._proxies.get(id(t))

    # --- recording for real -----------------------------------------------------------
    def _record(
        self, key: Any, call: _Call, original: Any, block: torch.nn.Module, args: Any, kwargs: Any
    ) -> Any:
        rec = self.recorder
        names = rec.names
        start = len(rec.top.bsyms)
        taken, counters = set(names.taken), dict(names._counters)
        n_constants, n_data_dependent = len(rec.constants), len(rec.data_dependent)
        # a write into an input, its state, or the base an input is a view of: not stamped
        watched = [*call.input_tensors, *_state_tensors(block)]
        watched += [rec._views[id(t)].base for t in watched if id(t) in rec._views]
        before = {id(t): (rec._proxies.get(id(t)), rec._versions.get(id(t))) for t in watched}
        # an attribute set or a parameter/buffer swapped inside: a side effect, not stamped
        attributes = (
            attributes_of(block),
            [id(t) for t in _state_tensors(block)],
            module_globals(block),
        )
        with reading_attributes(block) as reads:
            out = original(block, *args, **kwargs)
        recording = None
        if (
            reads is not None
            and len(rec.constants) == n_constants
            and len(rec.data_dependent) == n_data_dependent
            and all((rec._proxies.get(i), rec._versions.get(i)) == v for i, v in before.items())
            and attributes
            == (attributes_of(block), [id(t) for t in _state_tensors(block)], module_globals(block))
        ):
            drawn = drawn_since(names, taken, counters)
            generated = drawn.get("t", []) if drawn is not None and set(drawn) <= {"t"} else None
            if generated is not None:
                with torch._C.DisableTorchFunction():  # metadata reads: not the program's
                    recording = _recording(
                        rec, rec.top.bsyms[start:], call, generated, out, reads, self.fake
                    )
        if recording is not None:
            recording.module_globals = attributes[2]
        if recording is None:
            self.refused.add(key)
            return out
        candidate = _comparable(self.candidates.get(key), recording)
        if (
            candidate is not None
            and candidate.reads == recording.reads
            and candidate.module_globals == recording.module_globals
            and len(candidate.generated) == len(recording.generated)
            and fingerprints(
                _write_out(candidate, call, _renaming(candidate, call, recording.generated))
            )
            == fingerprints(recording.bsyms)
            and _outputs_agree(candidate, recording)
        ):
            self.proven.setdefault(key, []).append(recording)
            self.written_out.append(
                WrittenOut(recording, recording.path, tuple(recording.bsyms), _own(recording))
            )
        self.candidates[key] = recording
        return out

    # --- writing out ------------------------------------------------------------------
    def _stamp(self, recording: _Recording, call: _Call, run: Any) -> Any:
        """The block's call written out from `recording`; `run()` runs it eagerly, for the
        values of a real trace (_MISMATCH: they are not shaped as recorded)."""
        rec = self.recorder
        values, inside = None, []
        if not self.fake:
            ran = replayed(
                recording.out_spec,
                recording.out_leaves,
                call.input_tensors,
                run,
                recording.aten_ops() if rec.keeps_values else None,
            )
            if ran is None:
                return _MISMATCH
            values, inside = ran
        fresh = [rec.names.fresh(_prefix(n)) for n in recording.generated]
        mapping = _renaming(recording, call, fresh)
        written = _write_out(recording, call, mapping)
        rec.top.bsyms.extend(written)
        self.written_out.append(WrittenOut(recording, call.path, tuple(written), mapping))
        for made in inside:  # the values inside, for the call's first run, as they came
            if made.written:
                rec.holds_after_write(made.tensor, mapping[made.name])
            else:
                rec.bind(made.tensor, mapping[made.name])
        fake_mode = (
            next(
                t.fake_mode
                for t in [*call.input_tensors, *_state_tensors(call.block)]
                if isinstance(t, FakeTensor)
            )
            if recording.has_new_outputs and values is None
            else None
        )
        leaves = []
        for i, leaf in enumerate(recording.out_leaves):
            if isinstance(leaf, tuple) and leaf and leaf[0] == "in":
                leaves.append(call.input_tensors[leaf[1]])
            elif isinstance(leaf, tuple) and leaf and leaf[0] == "new":
                _, proxy, (shape, stride, dtype, device) = leaf
                t = (
                    values[i]
                    if values is not None
                    else _fake_tensor(fake_mode, shape, stride, dtype, device)
                )
                rec.bind(t, mapping[proxy.name])
                leaves.append(t)
            else:
                leaves.append(leaf)
        return pytree.tree_unflatten(leaves, recording.out_spec)


def _recording(
    rec: Any,
    bsyms: list[BoundSymbol],
    call: _Call,
    generated: list[str],
    out: Any,
    reads: dict[tuple[str, str], Any],
    fake: bool,
) -> _Recording | None:
    """`bsyms` as a reusable recording, or None where writing it out could differ."""
    own = set(generated)
    known = own | {p.name for p in call.inputs} | {p.name for p in call.state.values()}
    proxies: dict[str, Proxy] = {}
    for top in bsyms:
        for b in top.walk():
            # Random ops need no refusal: fake tensors draw nothing, and a recording that
            # depended on RNG state (or anything else that moves) fails the proof.
            if b.fwd_bsym is not None or BsymTag.DATA_DEPENDENT in b.tags:
                return None
            if not (b.module_path == call.path or b.module_path.startswith(call.path + ".")):
                return None
            for p in [*b.flat_proxy_args, *b.flat_proxy_outs]:
                if p.name not in known or isinstance(p, NumberProxy):
                    return None  # a value from outside the block's inputs and state
                if p.name in own:
                    proxies[p.name] = p
    leaves, spec = pytree.tree_flatten(out)
    input_ids = [id(t) for t in call.input_tensors]
    out_leaves: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            proxy = rec._proxies.get(id(leaf))
            if id(leaf) in input_ids and proxy is call.inputs[input_ids.index(id(leaf))]:
                out_leaves.append(("in", input_ids.index(id(leaf))))
                continue
            if (
                proxy is None
                or proxy.name not in own
                or not (isinstance(leaf, FakeTensor) if fake else type(leaf) is torch.Tensor)
                or leaf._base is not None
                or leaf.storage_offset() != 0
                or id(leaf) in rec._views
                or id(leaf) in rec._versions
            ):
                return None
            proxies[proxy.name] = proxy
            out_leaves.append(
                ("new", proxy, (tuple(leaf.shape), leaf.stride(), leaf.dtype, _device(leaf)))
            )
        elif type(leaf) in _PRIMITIVES:
            out_leaves.append(leaf)
        else:
            return None
    return _Recording(
        list(bsyms),
        list(call.inputs),
        dict(call.state),
        generated,
        proxies,
        spec,
        out_leaves,
        call.path,
        dict(reads),
    )


def _renaming(recording: _Recording, call: _Call, fresh: list[str]) -> dict[str, Proxy]:
    """The recording's proxies by name -> this call's: its inputs and state, and a proxy
    named `fresh[i]` for the i-th name the recording generated."""
    mapping: dict[str, Proxy] = {}
    for old, new in zip(recording.inputs, call.inputs, strict=True):
        mapping.setdefault(old.name, new)
    for name, old in recording.state.items():
        mapping.setdefault(old.name, call.state[name])
    for old_name, new_name in zip(recording.generated, fresh, strict=True):
        old = recording.proxies.get(old_name)
        if old is not None:
            mapping[old_name] = old.renamed(new_name)
    return mapping


def _own(recording: _Recording) -> dict[str, Proxy]:
    """The recording's proxies by name, each to itself: its renaming as written out."""
    own = [*recording.inputs, *recording.state.values(), *recording.proxies.values()]
    return {p.name: p for p in own}


def _write_out(recording: _Recording, call: _Call, mapping: dict[str, Proxy]) -> list[BoundSymbol]:
    """The recording's bound symbols for `call`, renamed by `mapping` (`_renaming`)."""
    return [rewritten(b, mapping, len(recording.path), call.path) for b in recording.bsyms]


def _comparable(candidate: _Recording | None, recording: _Recording) -> _Recording | None:
    """The candidate as it compares with `recording`: itself when both drew as many names;
    when the candidate (the first recording, which filled the recorder's per-trace caches)
    drew names it did not use, and `recording` used every name it drew (so it filled no
    cache, and the next recording starts from the caches it saw), the candidate without
    those names. Otherwise None: nothing to compare."""
    if candidate is None or len(candidate.generated) == len(recording.generated):
        return candidate
    if any(n not in recording.proxies for n in recording.generated):
        return None
    used = [n for n in candidate.generated if n in candidate.proxies]
    return (
        dataclasses.replace(candidate, generated=used)
        if len(used) == len(recording.generated)
        else None
    )


def _outputs_agree(a: _Recording, b: _Recording) -> bool:
    """The two recordings' outputs are the same structure, in corresponding places."""
    if a.out_spec != b.out_spec or len(a.out_leaves) != len(b.out_leaves):
        return False
    position = {n: i for i, n in enumerate(b.generated)}
    for x, y in zip(a.out_leaves, b.out_leaves, strict=True):
        if isinstance(x, tuple) and x and x[0] == "new":
            if (
                not (isinstance(y, tuple) and y and y[0] == "new")
                or x[2] != y[2]
                or a.generated.index(x[1].name) != position.get(y[1].name)
            ):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


# --- small helpers ----------------------------------------------------------------------
def _state_tensors(block: torch.nn.Module) -> list[torch.Tensor]:
    return [*block.parameters(), *block.buffers()]


def _tensor_sig(t: torch.Tensor, proxy: Proxy, alias: int) -> tuple[Any, ...]:
    return (
        tuple(t.shape),
        t.stride(),
        t.storage_offset(),
        t.dtype,
        _device(t),
        getattr(proxy, "requires_grad", None),
        type(proxy).__name__,
        alias,
        t._base is not None,
    )


def _device(t: torch.Tensor) -> torch.device:
    return t.fake_device if isinstance(t, FakeTensor) else t.device


def _prefix(name: str) -> str:
    return name.rstrip("0123456789")


def _fake_tensor(
    fake_mode: Any,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """A FakeTensor made outside the recorder's modes: nothing is recorded for it."""
    with unrecorded():
        meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        return fake_mode.fake_tensor_converter.from_meta_and_device(fake_mode, meta, device)
