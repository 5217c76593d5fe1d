"""Block stamping for fake traces: twelve identical transformer blocks recorded once.

A model's repeated blocks (the items of a ModuleList or Sequential that share their class
with a sibling) record the same ops each time, on other proxies. With fake tensors nothing
is computed, so once a block's recording is known for a *call signature* (the block's
class, training flag, grad and autocast modes, the structure, metadata and aliasing of its
inputs, its parameters' and buffers' metadata, and the values of the attributes its forward
read: capture/attribute_reads.py) a later call with the same signature can be
written out from that recording: the same bound symbols with fresh names drawn from the
trace's NameGenerator in the order the recording drew them, the block's own parameters in
place of the recorded block's, and module paths moved to the new block.

A recording is used only after it proved itself: two consecutive real recordings of one
signature must agree exactly once written out for each other (this also waits for the
recorder's caches, whose first fill names things differently, to be warm). Any block
that could record differently is recorded for real: one with hooks, one that reads a
tensor from outside its inputs and parameters, creates constants, mutates its inputs,
reads values, returns a view, takes a non-primitive Python object
(a KV cache), sets an attribute, or runs inside another recorded call.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from thunderviz.capture.attribute_reads import (
    MODULE_INTERNALS,
    current_values,
    reading_attributes,
    value_signature,
)
from thunderviz.core.proxies import NumberProxy, Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag

__all__ = ["stamping_blocks"]

_PRIMITIVES = (type(None), bool, int, float, str, torch.dtype, torch.device)
_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_forward_hooks_with_kwargs",
)


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


@contextlib.contextmanager
def stamping_blocks(recorder: Any, module: torch.nn.Module | None, enabled: bool) -> Iterator[None]:
    """While tracing `module` with fake tensors, write repeated blocks out from a proven
    recording instead of running them. Blocks' `forward` is shadowed on the instance for
    the duration, and restored after."""
    blocks = _repeated_blocks(module) if enabled and module is not None else []
    stamper = _Stamper(recorder)
    patched = []
    try:
        for block in blocks:
            block.forward = stamper.forward_of(block)
            patched.append(block)
        yield
    finally:
        for block in patched:
            del block.forward


def _repeated_blocks(root: torch.nn.Module) -> list[torch.nn.Module]:
    """Items of a ModuleList/Sequential sharing their class with a sibling; the outermost
    only (a Linear repeated inside a block is written out with its block)."""
    out: list[torch.nn.Module] = []
    inside: set[int] = set()
    for container in root.modules():
        if id(container) in inside:
            continue
        if not isinstance(container, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        children = list(container.children())
        for child in children:
            if "forward" in child.__dict__:
                continue  # a forward set on the instance: not ours to shadow
            if sum(type(c) is type(child) for c in children) >= 2:
                out.append(child)
                inside.update(id(m) for m in child.modules())
    return out


class _Stamper:
    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.candidates: dict[Any, _Recording] = {}
        self.proven: dict[Any, list[_Recording]] = {}
        self.refused: set[Any] = set()
        self.owner = threading.get_ident()

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
            module_globals = _module_globals(block) if proven_here else None
            for proven in proven_here:
                if proven.module_globals == module_globals and current_values(block, proven.reads):
                    return self._stamp(proven, call)
            if key in self.refused:
                return original(block, *args, **kwargs)
            return self._record(key, call, original, block, args, kwargs)

        return forward

    # --- the call signature -----------------------------------------------------------
    def _key(self, block: torch.nn.Module, args: Any, kwargs: Any) -> tuple[Any, _Call] | None:
        rec = self.recorder
        if len(rec._frames) != 1 or rec._device_override is not None or not _hook_free(block):
            return None
        path = rec.module_path
        leaves, spec = pytree.tree_flatten((args, kwargs))
        sig: list[Any] = [
            type(block),
            block.training,
            torch.is_grad_enabled(),
            _autocast_state(),
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
        """The proxy of a fake tensor the recorder knows, not a view it would re-derive."""
        rec = self.recorder
        if not isinstance(t, FakeTensor):
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
            _attributes(block),
            [id(t) for t in _state_tensors(block)],
            _module_globals(block),
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
            == (_attributes(block), [id(t) for t in _state_tensors(block)], _module_globals(block))
        ):
            generated = _drawn(names, taken, counters)
            if generated is not None:
                recording = _recording(rec, rec.top.bsyms[start:], call, generated, out, reads)
        if recording is not None:
            recording.module_globals = attributes[2]
        if recording is None:
            self.refused.add(key)
            return out
        candidate = self.candidates.get(key)
        if (
            candidate is not None
            and candidate.reads == recording.reads
            and candidate.module_globals == recording.module_globals
            and len(candidate.generated) == len(recording.generated)
            and _fingerprint_all(_write_out(candidate, call, recording.generated))
            == _fingerprint_all(recording.bsyms)
            and _outputs_agree(candidate, recording)
        ):
            self.proven.setdefault(key, []).append(recording)
        self.candidates[key] = recording
        return out

    # --- writing out ------------------------------------------------------------------
    def _stamp(self, recording: _Recording, call: _Call) -> Any:
        rec = self.recorder
        fresh = [rec.names.fresh(_prefix(n)) for n in recording.generated]
        rec.top.bsyms.extend(_write_out(recording, call, fresh))
        renamed = dict(zip(recording.generated, fresh, strict=True))
        fake_mode = (
            next(
                t.fake_mode
                for t in [*call.input_tensors, *_state_tensors(call.block)]
                if isinstance(t, FakeTensor)
            )
            if recording.has_new_outputs
            else None
        )
        leaves = []
        for leaf in recording.out_leaves:
            if isinstance(leaf, tuple) and leaf and leaf[0] == "in":
                leaves.append(call.input_tensors[leaf[1]])
            elif isinstance(leaf, tuple) and leaf and leaf[0] == "new":
                _, proxy, (shape, stride, dtype, device) = leaf
                t = _fake_tensor(fake_mode, shape, stride, dtype, device)
                rec.bind(t, proxy.renamed(renamed[proxy.name]))
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
                or not isinstance(leaf, FakeTensor)
                or leaf._base is not None
                or leaf.storage_offset() != 0
                or id(leaf) in rec._views
                or id(leaf) in rec._versions
            ):
                return None
            proxies[proxy.name] = proxy
            out_leaves.append(
                ("new", proxy, (tuple(leaf.shape), leaf.stride(), leaf.dtype, leaf.fake_device))
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


def _write_out(recording: _Recording, call: _Call, fresh: list[str]) -> list[BoundSymbol]:
    mapping: dict[str, Proxy] = {}
    for old, new in zip(recording.inputs, call.inputs, strict=True):
        mapping.setdefault(old.name, new)
    for name, old in recording.state.items():
        mapping.setdefault(old.name, call.state[name])
    for old_name, new_name in zip(recording.generated, fresh, strict=True):
        old = recording.proxies.get(old_name)
        if old is not None:
            mapping[old_name] = old.renamed(new_name)
    return [_rewritten(b, mapping, len(recording.path), call.path) for b in recording.bsyms]


def _rewritten(b: BoundSymbol, mapping: dict[str, Proxy], cut: int, path: str) -> BoundSymbol:
    """`b.rename(mapping)` with its module paths moved from the recorded block to `path`,
    in one pass and without pytree (this runs for every bound symbol stamped)."""
    return b.with_changes(
        args=_swap(b.args, mapping),
        kwargs=_swap(b.kwargs, mapping),
        output=_swap(b.output, mapping),
        module_path=path + b.module_path[cut:],
        subsymbols=[_rewritten(s, mapping, cut, path) for s in b.subsymbols],
    )


def _swap(x: Any, mapping: dict[str, Proxy]) -> Any:
    kind = type(x)
    if kind is tuple or kind is list:
        return kind(_swap(v, mapping) for v in x)
    if kind is dict:
        return {k: _swap(v, mapping) for k, v in x.items()}
    if isinstance(x, Proxy):
        return mapping.get(x.name, x)
    if isinstance(x, (tuple, list, dict)):  # namedtuples, return types: as rename does
        return pytree.tree_map(lambda y: mapping.get(y.name, y) if isinstance(y, Proxy) else y, x)
    return x


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


# --- fingerprints: everything about a bound symbol a trace can show -------------------------
def _fingerprint_all(bsyms: list[BoundSymbol]) -> list[Any]:
    return [_fingerprint(b) for b in bsyms]


def _fingerprint(b: BoundSymbol) -> tuple[Any, ...]:
    return (
        b.sym.id,
        b.sym.name,
        repr(pytree.tree_map(_describe, b.args)),
        repr(pytree.tree_map(_describe, b.kwargs)),
        repr(pytree.tree_map(_describe, b.output)),
        repr(b.source),
        b.module_path,
        sorted(t.name for t in b.tags),
        b.header,
        [_fingerprint(s) for s in b.subsymbols],
    )


def _describe(x: Any) -> Any:
    if isinstance(x, TensorProxy):
        return ("T", x.name, x.shape, x.dtype, x.device, x.requires_grad)
    if isinstance(x, Proxy):
        return (type(x).__name__, x.name, repr(getattr(x, "value", None)))
    return x


# --- small helpers ----------------------------------------------------------------------
def _hook_free(block: torch.nn.Module) -> bool:
    if (
        len(torch.nn.modules.module._global_forward_hooks) > 1
        or len(torch.nn.modules.module._global_forward_pre_hooks) > 1
        or torch.nn.modules.module._global_backward_hooks
        or torch.nn.modules.module._global_backward_pre_hooks
    ):
        return False  # ours are one of each: module paths
    return all(not getattr(m, d, None) for m in block.modules() for d in _HOOK_DICTS)


def _attributes(block: torch.nn.Module) -> tuple[Any, ...]:
    """Every plain attribute of the block and its submodules, to see one set in a forward."""
    out = []
    for name, m in block.named_modules(remove_duplicate=False):
        items = []
        for key, value in m.__dict__.items():
            if key in MODULE_INTERNALS or key == "forward":
                continue
            items.append((key, value_signature(value)))
        out.append((name, type(m), tuple(items)))
    return tuple(out)


def _module_globals(block: torch.nn.Module) -> tuple[Any, ...]:
    """The globals of the files the block's modules' forwards are written in: a forward
    that sets one is recorded, and a block is written out only while they are as they were
    when its recording ran (a flag the model flips between blocks)."""
    spaces = {
        id(g): g
        for g in (getattr(type(m).forward, "__globals__", None) for m in block.modules())
        if g is not None
    }
    return tuple((key, value_signature(value)) for g in spaces.values() for key, value in g.items())


def _state_tensors(block: torch.nn.Module) -> list[torch.Tensor]:
    return [*block.parameters(), *block.buffers()]


def _tensor_sig(t: torch.Tensor, proxy: Proxy, alias: int) -> tuple[Any, ...]:
    return (
        tuple(t.shape),
        t.stride(),
        t.storage_offset(),
        t.dtype,
        t.fake_device,
        getattr(proxy, "requires_grad", None),
        type(proxy).__name__,
        alias,
        t._base is not None,
    )


def _autocast_state() -> tuple[Any, ...]:
    return tuple(
        (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
    ) + (torch.is_autocast_cache_enabled(),)


def _drawn(names: Any, taken: set[str], counters: dict[str, int]) -> list[str] | None:
    """The fresh names drawn since the snapshot, in order; None if a name was claimed or a
    prefix other than `t` was drawn (constants, numbers: not ours to repeat)."""
    added = names.taken - taken
    drawn = []
    for prefix, end in names._counters.items():
        start = counters.get(prefix, 0)
        if end == start:
            continue
        if prefix != "t":
            return None
        drawn += [f"t{n}" for n in range(start, end) if f"t{n}" not in taken]
    return drawn if set(drawn) == added else None


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
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        return fake_mode.fake_tensor_converter.from_meta_and_device(fake_mode, meta, device)
