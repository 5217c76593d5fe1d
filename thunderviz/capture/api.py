"""`thunderviz.trace`: run a function or nn.Module once and return its forward Trace."""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils import _pytree as pytree

from thunderviz.capture.attribute_writes import AttributeWrites
from thunderviz.capture.control_flow import choosing_branches
from thunderviz.capture.errors import CaptureError
from thunderviz.capture.function_apply import intercepting_function_apply
from thunderviz.capture.generators import PythonDraws, state_calls_recorded
from thunderviz.capture.input_aliasing import (
    SameViewInputs,
    refuse_written_overlaps,
    sharing,
)
from thunderviz.capture.input_copies import converter
from thunderviz.capture.module_backward_hooks import backward_hooks_traced
from thunderviz.capture.nested_fast_path import encoding_as_eager
from thunderviz.capture.recorded_values import RecordedValues
from thunderviz.capture.recorder import Recorder
from thunderviz.capture.rewriting import WrittenOut
from thunderviz.capture.stamped_values import replaying
from thunderviz.capture.stamping import stamping_blocks
from thunderviz.capture.write_backs import (
    outside_write_backs,
    restore_outside,
    write_backs,
)
from thunderviz.core.dataclass_nodes import FieldsKept, opened, opened_leaves
from thunderviz.core.inputs import InputKind, TraceInput
from thunderviz.core.module_state import own_tensors_kept
from thunderviz.core.plain import PLAIN, SCALARS, is_immutable_value
from thunderviz.core.proxies import NameGenerator, NumberProxy, Proxy, TensorProxy
from thunderviz.core.rng import preserved_rng
from thunderviz.core.trace import Trace, TraceTag, timed_provenance
from thunderviz.core.working import working

__all__ = ["trace", "trace_for_jit", "CaptureError"]


def trace(fn: Callable[..., Any], *args: Any, fake: bool = False, **kwargs: Any) -> Trace:
    """Run `fn(*args, **kwargs)` once and record it as a Trace.

    `fn` is a function or an `nn.Module`. For a module, its parameters and then its buffers
    (in `named_parameters()` / `named_buffers()` order) follow the user's positional inputs
    in `trace.args`, named after their paths (`fc1.weight` -> `fc1_weight`); keyword inputs
    become keyword-only arguments (`trace.kwargs`). `trace.inputs` says what each argument is
    (`core/inputs.py`). With `fake=True` every tensor is a
    FakeTensor: nothing is computed and no activation memory is used.

    Tracing has no side effects: the module's parameters, buffers, `requires_grad` flags and
    `.grad`, the inputs and the global RNG state are as they were.
    """
    if not callable(fn):
        raise TypeError(
            f"thunderviz.trace expects a function or an nn.Module, got {type(fn).__name__}"
        )
    if not isinstance(fake, bool):
        raise TypeError(f"fake must be True or False, got {fake!r}")
    module = fn if isinstance(fn, torch.nn.Module) else None
    with (
        timed_provenance("thunderviz.trace", "fake tensors" if fake else "") as prov,
        working(),
    ):
        result, _ = _trace(fn, module, args, kwargs, fake)
    result.provenance.append(prov.result)
    return result


def trace_for_jit(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], keep_values: bool
) -> tuple[Trace, RecordedValues | None]:
    """What `jit` traces: `trace(fn, *args, **kwargs)`, except that a module's own forward
    hooks and pre-hooks (and the global ones, as they apply to it) are not run (`jit` runs
    them around each call, as eager does; hooks of its submodules are traced as usual);
    with `keep_values`, also the values the recording computed for this call
    (`capture/recorded_values.py`)."""
    module = fn if isinstance(fn, torch.nn.Module) else None
    with (
        timed_provenance("thunderviz.trace") as prov,
        working(),
    ):
        result, recorded = _trace(
            fn, module, args, kwargs, False, own_hooks=False, keep=keep_values
        )
    result.provenance.append(prov.result)
    return result, recorded


def _trace(
    fn: Callable[..., Any],
    module: torch.nn.Module | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    fake: bool,
    own_hooks: bool = True,
    keep: bool = False,
) -> tuple[Trace, RecordedValues | None]:
    """The trace and, with `keep`, the values its recording computed."""
    names = NameGenerator()
    module_names = {}
    if module is not None:
        for path, m in module.named_modules(remove_duplicate=False):
            module_names.setdefault(id(m), path)
    recorder = Recorder(names, module_names)
    if keep:
        recorder.keep_values()
    state = (
        []
        if module is None
        else [
            *((path, t, InputKind.PARAMETER) for path, t in module.named_parameters()),
            *((path, t, InputKind.BUFFER) for path, t in module.named_buffers()),
        ]
    )
    # closed at the end: the values it bound die with it, not at the next collection
    with contextlib.closing(recorder), preserved_rng(), _fake_mode(fake) as fake_mode:
        # the user's values in the trace's input order: positional, state, keyword
        users = [
            *opened_leaves(args),
            *(t for _, t, _ in state),
            *opened_leaves(kwargs),
        ]
        convert = SameViewInputs(converter(fake_mode, users))
        recorder.given = convert.users
        pos_names, kw_names = _input_names(fn, args, kwargs)
        trace_args: list[Proxy] = []
        trace_kwargs: dict[str, Proxy] = {}
        inputs: list[TraceInput] = []
        # (the tensor the program runs on, its proxy): what may need a write-back at the end
        originals: list[tuple[torch.Tensor, Proxy]] = []
        run_args = [
            _proxy_input(
                recorder, names, a, n, convert, trace_args, originals, inputs, InputKind.POSITIONAL
            )
            for a, n in zip(args, pos_names, strict=True)
        ]
        run_kwargs = {}
        holder: list[Proxy] = []
        keyword_inputs: list[TraceInput] = []  # after the state, though bound before it
        for key, value in kwargs.items():
            run_kwargs[key] = _proxy_input(
                recorder,
                names,
                value,
                kw_names[key],
                convert,
                holder,
                originals,
                keyword_inputs,
                InputKind.KEYWORD,
                key,
            )
        trace_kwargs.update({p.name: p for p in holder})
        run_state: dict[str, torch.Tensor] = {}
        state_proxies: dict[str, Proxy] = {}
        for path, tensor, kind in state:
            inputs.append(TraceInput(kind, path))
            copy = convert(tensor)
            proxy = TensorProxy.like(names.claim(path), copy, requires_grad=tensor.requires_grad)
            recorder.bind(copy, proxy)
            run_state[path] = copy
            state_proxies[path] = proxy
            trace_args.append(proxy)
            originals.append((copy, proxy))
        for alias, first in convert.aliases:
            recorder.bind_alias(alias, first)
        input_proxies = [*trace_args, *holder]  # as `users` are ordered
        recorder.input_names = frozenset(p.name for p in input_proxies)
        recorder.state_names = frozenset(p.name for p in state_proxies.values())
        recorder.leaf_inputs = frozenset(
            p.name
            for p, u in zip(input_proxies, users, strict=True)
            if isinstance(u, torch.Tensor) and u.is_leaf
        )
        before = dict(run_state)
        writes = AttributeWrites(module)
        python_draws = PythonDraws()
        try:
            fields = FieldsKept((run_args, run_kwargs))
            out, written_out = _run(
                fn, module, run_args, run_kwargs, run_state, recorder, own_hooks, fake
            )
            _refuse_rebound_fields(fields, recorder)
            # (a dataclass it returns holds values of the run: core/dataclass_nodes.py)
            opened_out = opened(out)
            output = (
                recorder.proxify(out)
                if opened_out is out
                else pytree.tree_map(recorder.proxify, opened_out)
            )
            written = writes.collect(recorder)
            written_values = writes.collect_values()
        finally:
            writes.restore()
            restore_outside(recorder)
        replaced = _reassigned(before, run_state, state_proxies)
        epilogue = write_backs(recorder, [*originals, *replaced])
        written_names = {b.args[0].name for b in epilogue}
        inputs_written = {i for i, p in enumerate(input_proxies) if p.name in written_names}
        shared = sharing(users)
        made_leaves = tuple(
            i
            for i, p in enumerate(input_proxies)
            if p.name in recorder.made_leaves and p.name in recorder.leaf_inputs
        )
        refuse_written_overlaps(users, shared, [p.name for p in input_proxies], inputs_written)
        # here, where the program's draws are done and the generators not yet restored
        recorder.generators.settle()
        recorded = recorder.recorded(originals) if keep else None
        epilogue += outside_write_backs(recorder)
        prelude = recorder.generators.finish(recorder.constants, recorder.proxy_of)
    with_paths, spec = pytree.tree_flatten_with_path(opened(output))
    flat = [x for _, x in with_paths]
    # (key path, what it is) of each: an immutable value is handed back as it was (equal on
    # every call the trace is right for), anything else is program state, which
    # executor/dropped_outputs.py stands in for
    dropped = [
        (path, x if is_immutable_value(x) else type(x).__name__)
        for path, x in with_paths
        if not _printable_leaf(x)
    ]
    if dropped:
        # e.g. a Hugging Face KV cache object: program state, not a value a trace returns
        flat = [x if _printable_leaf(x) else None for x in flat]
        output = pytree.tree_unflatten(flat, spec)
    native = _is_native_structure(output)
    trace = Trace(
        name="forward",
        args=trace_args,
        kwargs=trace_kwargs,
        inputs=inputs + keyword_inputs,
        bound_symbols=[*prelude, *recorder.top.bsyms, *epilogue],
        output=output if native else tuple(flat),
        output_spec=None if native else spec,
        tags={TraceTag.FORWARD},
        constants=dict(recorder.constants),
        names=names,
        meta={
            "fake": fake,
            "dropped_outputs": dropped,
            "module_class": type(module).__name__ if module is not None else None,
            "function": getattr(fn, "__name__", type(fn).__name__),
            # (module path, attribute, proxy): tensors the forward assigned to attributes
            "attribute_writes": written,
            # (module path, attribute, value): plain values it assigned (`self.ptr = 3`)
            "attribute_values": written_values,
            # repeated blocks written out from one recording (capture/rewriting.WrittenOut)
            "written_out": written_out,
            # why a run of the trace is not this program's run on other inputs ("": it is):
            # Python or numpy random draws (capture/generators.py), values handed to numpy
            "unreplayable": python_draws.drawn() or recorder.unreplayable,
            # the inputs that shared memory (capture/input_aliasing.py)
            "input_sharing": shared,
            # positions of the inputs the program made leaves (`x.requires_grad_()`)
            "inputs_made_leaves": made_leaves,
            # values the program called `retain_grad()` on, by name (capture/recorder.py)
            "retains_grad": frozenset(recorder.retains_grad),
        },
    )
    return trace, recorded


def _run(
    fn: Callable[..., Any],
    module: torch.nn.Module | None,
    args: list[Any],
    kwargs: dict[str, Any],
    state: dict[str, torch.Tensor],
    recorder: Recorder,
    own_hooks: bool = True,
    fake: bool = False,
) -> tuple[Any, tuple[WrittenOut, ...]]:
    """The program's output, and the blocks stamping wrote out."""
    with (
        _module_hooks(recorder),
        recorder.function_mode,
        recorder.dispatch_mode,
        intercepting_function_apply(recorder),
        encoding_as_eager(),
        choosing_branches(),
        stamping_blocks(recorder, module, fake) as written_out,
        backward_hooks_traced(module, with_root=own_hooks),
        state_calls_recorded(recorder),
    ):
        if module is None:
            out = fn(*args, **kwargs)
        elif not own_hooks:  # forward itself: the module's own hooks are the caller's
            with (
                own_tensors_kept(module),  # (core/module_state.py: a block at two paths)
                _reparametrize_module(module, state, tie_weights=True, strict=False),
            ):
                out = module.forward(*args, **kwargs)
        else:
            with own_tensors_kept(module):
                out = torch.func.functional_call(
                    module, state, tuple(args), kwargs, tie_weights=True, strict=False
                )
    return out, tuple(written_out)


@contextlib.contextmanager
def _module_hooks(recorder: Recorder) -> Iterator[None]:
    """Module paths come from forward hooks, which torch only has process-wide. They act
    only for calls made in the thread that traces: another thread's modules (tracing a
    model of its own, or running eagerly) never land in this trace's module paths."""
    owner = threading.get_ident()

    def pre(module: torch.nn.Module, _args: Any) -> None:
        if threading.get_ident() == owner and not replaying():
            recorder.enter_module(module)

    def post(module: torch.nn.Module, _args: Any, _out: Any) -> None:
        if threading.get_ident() == owner and not replaying():
            recorder.exit_module(module)

    handles = [
        torch.nn.modules.module.register_module_forward_pre_hook(pre),
        torch.nn.modules.module.register_module_forward_hook(post),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _reassigned(
    before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], proxies: dict[str, Proxy]
) -> list[tuple[torch.Tensor, Proxy]]:
    """Buffers the forward replaced (`self.ema = 0.9 * self.ema + ...`, a step counter
    `self.steps = self.steps + 1`): torch's reparametrization leaves the new tensors in the
    state dict it ran with. Each is written back into the buffer as an in-place update is, so
    the module holds the value eager leaves in it; a replacement of another shape, dtype or
    device (or by something not a tensor) could not be, and is refused."""
    out = []
    for path, tensor in after.items():
        old = before[path]
        if tensor is old:
            continue
        if not (
            isinstance(tensor, torch.Tensor)
            and (tensor.shape, tensor.dtype, tensor.device) == (old.shape, old.dtype, old.device)
        ):
            got = (
                f"{tuple(tensor.shape)} {tensor.dtype} on {tensor.device}"
                if isinstance(tensor, torch.Tensor)
                else type(tensor).__name__
            )
            raise CaptureError(
                f"the forward replaces {path!r} ({tuple(old.shape)} {old.dtype} on "
                f"{old.device}) with {got}: a trace writes a buffer's new value back into it, "
                "which needs the same shape, dtype and device. Update it in place "
                "(`.copy_()`), or keep the new value as a plain attribute.",
                op="setattr",
            )
        out.append((tensor, proxies[path]))
    return out


def _proxy_input(
    recorder: Recorder,
    names: NameGenerator,
    value: Any,
    name: str,
    convert: Callable[[torch.Tensor], torch.Tensor],
    out: list[Proxy],
    originals: list[tuple[torch.Tensor, Proxy]],
    inputs: list[TraceInput],
    kind: InputKind,
    path: str | None = None,
) -> Any:
    """Give each leaf of one user input a proxy (and a TraceInput); return the value the
    program runs on."""
    leaves, spec = pytree.tree_flatten(opened(value))  # (a dataclass's fields: inputs)
    run_leaves = []
    for i, leaf in enumerate(leaves):
        inputs.append(TraceInput(kind, path or name, i))
        leaf_name = names.claim(name if len(leaves) == 1 else f"{name}_{i}")
        if isinstance(leaf, torch.Tensor):
            copy = convert(leaf)
            proxy: Proxy = TensorProxy.like(leaf_name, copy, requires_grad=leaf.requires_grad)
            recorder.bind(copy, proxy)
            run_leaves.append(copy)
            originals.append((copy, proxy))
        else:
            proxy = (
                NumberProxy(leaf_name, leaf)
                if isinstance(leaf, (int, float, bool))
                else Proxy(leaf_name)
            )
            run_leaves.append(leaf)
        out.append(proxy)
    return pytree.tree_unflatten(run_leaves, spec)


def _refuse_rebound_fields(fields: FieldsKept, recorder: Recorder) -> None:
    """A field of a dataclass the program was given, rebound by it: refused
    (core/dataclass_nodes.FieldsKept says why)."""
    rebound = fields.rebound()
    if rebound:
        raise CaptureError(
            f"the program rebinds {rebound}, a field of a dataclass it is given: thunderviz "
            "runs the program on a copy of the dataclass (its tensors are the trace's inputs), "
            "so the change would not reach yours. Return the new value instead.",
            op="setattr",
            module_path=recorder.module_path,
        )


def _input_names(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[str], dict[str, str]]:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        sig = inspect.signature(target)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError) as e:
        if isinstance(e, TypeError) and "argument" in str(e):
            raise TypeError(
                f"thunderviz.trace: the inputs don't match "
                f"{getattr(target, '__qualname__', target)}{_sig(target)}: {e}"
            ) from None
        return [f"arg{i}" for i in range(len(args))], {k: k for k in kwargs}
    pos: list[str] = []
    for name, value in bound.arguments.items():
        param = sig.parameters[name]
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            pos += [f"{name}_{i}" for i in range(len(value))]
        elif (
            param.kind
            in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            and name not in kwargs
        ):
            pos.append(name)
    return pos[: len(args)] + [f"arg{i}" for i in range(len(pos), len(args))], {
        k: k for k in kwargs
    }


def _sig(target: Any) -> str:
    try:
        return str(inspect.signature(target))
    except (TypeError, ValueError):
        return "(...)"


def _printable_leaf(x: Any) -> bool:
    return isinstance(x, (Proxy, *PLAIN))


def _is_native_structure(output: Any) -> bool:
    if output is None or isinstance(output, Proxy):
        return True
    if type(output) in (tuple, list):
        return all(_is_native_structure(o) for o in output)
    if type(output) is dict:
        return all(isinstance(k, str) and _is_native_structure(v) for k, v in output.items())
    return isinstance(output, tuple(SCALARS))


@contextlib.contextmanager
def _fake_mode(fake: bool) -> Iterator[Any]:
    if not fake:
        yield None
        return
    from_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with from_mode:
        yield from_mode
