"""The recorder: one run of the user's program under two nested modes.

The TorchFunctionMode sees each torch-level call (`F.linear`, `x.view(...)`, `a + b`) with
the user's frame on the stack; the TorchDispatchMode inside it sees the ATen ops that call
becomes. Each torch-level call becomes a top-level BoundSymbol whose subsymbols are its ATen
ops; ATen ops outside Core ATen get their decomposition (torch's own tables) as subsymbols
(`decompositions.py`), and mutation is made functional in the recording (`mutation.py`). The
tensor -> proxy map and the frames being filled are `recorder_state.py`'s.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch._subclasses.fake_tensor
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from thunderviz.capture.autocast import autocast_enabled, hoist_autocast_casts
from thunderviz.capture.collectives import (
    is_collective_call,
    is_collective_op,
    record_collective_call,
    record_collective_op,
)
from thunderviz.capture.custom_op_autograd import has_registered_autograd, record_custom_op_call
from thunderviz.capture.dispatch_mode import DynamoSafeDispatchMode
from thunderviz.capture.errors import CaptureError
from thunderviz.capture.function_apply import printable_arguments
from thunderviz.capture.functorch_transforms import refuse_inside_transform, transform_level
from thunderviz.capture.given_tensors import looks_at, refuse_given_state
from thunderviz.capture.grad_flags import (
    REQUIRES_GRAD_SETTERS,
    UNKNOWN,
    answering_grad_flags,
    eager_read,
    made_a_leaf,
)
from thunderviz.capture.guards import (
    as_the_user_reads,
    has_data_dependent_size,
    reads_values,
)
from thunderviz.capture.host_filled import (
    EMPTY_FACTORIES,
    forget_written,
    note_unfilled,
    settle_host_filled,
)
from thunderviz.capture.mutation import FunctionalizingRecorder
from thunderviz.capture.no_grad_updates import (
    MAX_NORM_LOOKUPS,
    detached_alias_bases,
    embedding_renorm_apart,
    grad_requiring_args,
    max_norm_embedding,
    reattach_no_grad_updates,
)
from thunderviz.capture.recorder_state import Frame
from thunderviz.capture.source import user_source
from thunderviz.capture.tensor_hooks import record_tensor_hook
from thunderviz.capture.write_backs import note_outside_write
from thunderviz.core.dispatch_settings import changed_beyond_kernels, dispatch_settings
from thunderviz.core.locations import where
from thunderviz.core.proxies import NameGenerator, NumberProxy, leaves
from thunderviz.core.symbol import BoundSymbol, BsymTag, Origin, Symbol
from thunderviz.prims.aliasing import is_view_op, mutated_arg_indices, mutated_tensors
from thunderviz.prims.torch_symbols import (
    functional_method_name,
    is_property_read,
    torch_symbol,
)

__all__ = ["Recorder"]

aten = torch.ops.aten
# Exceptions FakeTensors raise when Python needs a value they do not have.
_FAKE_TENSOR_ERRORS: tuple[type[BaseException], ...] = tuple(
    e
    for e in (
        getattr(torch._subclasses.fake_tensor, "DataDependentOutputException", None),
        getattr(torch._subclasses.fake_tensor, "DynamicOutputShapeException", None),
    )
    if e is not None
)


def _is_data_dependent(e: BaseException) -> bool:
    """One of those, or symbolic shapes' guard on a data-dependent size. That module is read
    from sys.modules, not imported: it brings sympy (about half a second of `import
    thunderviz`), and an exception of its class exists only once something imported it."""
    if isinstance(e, _FAKE_TENSOR_ERRORS):
        return True
    shapes = sys.modules.get("torch.fx.experimental.symbolic_shapes")
    guard = getattr(shapes, "GuardOnDataDependentSymNode", None)
    return guard is not None and isinstance(e, guard)


_REGISTER_HOOK = torch.Tensor.register_hook
_RETAIN_GRAD = torch.Tensor.retain_grad
# Calls that take tensor values out of torch where the trace cannot follow them: what the
# program does with them (a number computed in numpy, a line printed) happens once, when
# it is traced, and a run of the trace would not do it again
_VALUES_LEAVE_TORCH = {
    torch.Tensor.numpy: "hands tensor values to numpy",
    torch.Tensor.__array__: "hands tensor values to numpy",
    torch.Tensor.__repr__: "prints tensor values",
    torch.Tensor.__format__: "formats tensor values into a string",
}
_INNER_AUTOGRAD = (torch.autograd.grad, torch.autograd.backward, torch.Tensor.backward)
# How `torch.autograd.grad` inside the program is taken: by the autodiff layer, above this
# one, which registers its function here (autodiff/inner_grad.py). It is called as
# `fn(recorder, *args, **kwargs)` in place of torch's, and its ATen ops are recorded as the
# call's subsymbols. While none is registered, the call is refused.
INNER_GRAD: list[Callable[..., Any]] = []
INNER_GRAD_ID = "torch.autograd.grad"  # the id of such a call's bound symbol
_INNER_GRAD_SYMBOL = Symbol(name=INNER_GRAD_ID, id=INNER_GRAD_ID, fn=torch.autograd.grad)


class Recorder(FunctionalizingRecorder):
    """Records each torch-level call and the ATen ops it becomes."""

    def __init__(self, names: NameGenerator, module_names: dict[int, str]) -> None:
        super().__init__(names, module_names)
        self.data_dependent: list[BoundSymbol] = []
        self.function_mode = _FunctionMode(self)
        self.dispatch_mode = _DispatchMode(self)
        # why a run of the trace would not be this program's run on other values, if it
        # would not be (a jitted program traced so is traced on every call)
        self.unreplayable = ""
        # the input proxies whose user tensors are autograd leaves (capture/api.py binds them)
        self.leaf_inputs: frozenset[str] = frozenset()
        self.retains_grad: set[str] = set()  # values the program called `retain_grad()` on
        self.input_names: frozenset[str] = frozenset()  # every input's, leaf or not
        self.state_names: frozenset[str] = frozenset()  # the modules' parameters and buffers
        self.given: dict[int, torch.Tensor] = {}  # id of an input's copy -> the user's tensor
        self.dispatch_settings = dispatch_settings()  # as the program starts (jit's key)
        self.transform_level = transform_level()  # torch.func's, as the program starts

    def close(self) -> None:
        """The recording is over: the recorder stops referring to its modes, which refer to
        it. Without that cycle it dies with the last reference to it, and with it every
        tensor it kept alive (each value the program computed, 50 MB for the written-out
        GPT); with it they all waited for a collection of cyclic garbage, which then had to
        look at them all (a third of the young collection after a first call)."""
        del self.function_mode, self.dispatch_mode

    # --- torch level ------------------------------------------------------------------
    def _read_property(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> Any:
        """`x.shape`, `x.dtype` ... read from the tensor the program runs on; `requires_grad`,
        `is_leaf` and `grad_fn` from its proxy (capture/grad_flags.py): the tensors capture
        runs on never require grad (autograd records nothing while we trace), and a program
        that branches on them (`if h.requires_grad:`) must take the branch eager takes."""
        answer = eager_read(self, func, args)
        return func(*args, **kwargs) if answer is UNKNOWN else answer

    def _what_runs(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """What runs for the program's call of `func`: itself, but for autograd's calls."""
        if func is torch.autograd.grad and INNER_GRAD:
            return functools.partial(INNER_GRAD[0], self)
        if func in _INNER_AUTOGRAD:
            self._refuse_inner_autograd(func)
        return func

    def _refuse_inner_autograd(self, func: Callable[..., Any]) -> None:
        source = user_source(skip=4)
        name = _call_name(func)
        raise CaptureError(
            f"{name} at {where(source, self.module_path)}: a backward inside the traced "
            "program accumulates into the `.grad` of each leaf it reaches, an effect a trace "
            "does not carry. Take the gradients as values instead, `torch.autograd.grad(loss, "
            "params)`, which thunderviz traces (with create_graph=True too), or call "
            "`.backward()` on the traced call's output, outside it.",
            op=name,
            source=source,
            module_path=self.module_path,
        )

    def _refuse_untraceable(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Stop at a call no trace can hold: one inside a torch.func transform
        (capture/functorch_transforms.py), one that reads state of a given tensor the trace
        runs a copy of (capture/given_tensors.py)."""
        if transform_level() != self.transform_level:
            refuse_inside_transform(_call_name(func), self.module_path)
        if args and looks_at(func):
            refuse_given_state(self, func, args, kwargs)

    def _under_changed_settings(self, func: Callable[..., Any], source: Any) -> bool:
        """Whether `func` ran under settings that pick ops (core/dispatch_settings.py) other
        than the program started with. Where more than the attention kernels changed, the
        same ops compute other things: no run of the trace is the program's."""
        now = dispatch_settings()
        if now == self.dispatch_settings:
            return False
        beyond = changed_beyond_kernels(self.dispatch_settings, now)
        if beyond and not self.unreplayable:
            self.unreplayable = (
                f"changes torch's settings as it runs ({beyond}), before {_call_name(func)} "
                f"at {where(source, self.module_path)}"
            )
        return True

    def _retain_grad(self, t: torch.Tensor) -> None:
        """`t.retain_grad()`: eager's no-op on a leaf, eager's error where nothing requires
        grad. Otherwise kept by name (`trace.meta["retains_grad"]`): a value the program
        returns or keeps on a module has it called on what the user gets (jit's bridge), whose
        backward then sets `.grad` to the whole gradient, as eager's (executor/output_hooks.py);
        one the program keeps nowhere no one can read `.grad` of."""
        proxy = self.proxy_of(t)
        if not getattr(proxy, "requires_grad", False):
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if proxy.name not in self.leaf_inputs:  # a leaf's .grad is kept anyway
            self.retains_grad.add(proxy.name)

    def on_torch_function(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        self._refuse_untraceable(func, args, kwargs)
        if is_property_read(func):
            return self._read_property(func, args, kwargs)
        if func is _REGISTER_HOOK and args and getattr(self.proxy_of(args[0]), "requires_grad", 0):
            return record_tensor_hook(self, args[0], args[1] if len(args) > 1 else kwargs["hook"])
        run = self._what_runs(func)
        if func in REQUIRES_GRAD_SETTERS and args:
            tensor, *flags = args
            return made_a_leaf(
                self, tensor, bool(flags[0] if flags else kwargs.get("requires_grad", True))
            )
        if func is _RETAIN_GRAD and args:
            return self._retain_grad(args[0])
        leaves = _VALUES_LEAVE_TORCH.get(func)
        if leaves is not None and not self.unreplayable:
            where_ = where(user_source(skip=3), self.module_path)
            self.unreplayable = f"{leaves} ({_call_name(func)}) at {where_}"
        if func in MAX_NORM_LOOKUPS and (call := max_norm_embedding(func, args, kwargs)):
            return embedding_renorm_apart(self, func, call)
        if is_collective_call(func):  # torch.distributed: capture/collectives.py
            return record_collective_call(self, func, args, kwargs)
        source = user_source(skip=3)
        p_args, p_kwargs = printable_arguments(self, self.proxify((args, kwargs)))
        grad_enabled = torch.is_grad_enabled()
        # (a torch function's own body: our VJP in place of `torch.autograd.grad` sets grad
        # modes of its own, and reruns user Functions' forwards, whose no_grad is eager's)
        frame = Frame(called_with_grad=grad_enabled and run is func)
        outer_source, self._source = self._source, source
        # what the call may update in place behind autograd's back: a weight it clamps under
        # no_grad, a parameter written through `.data` (capture/no_grad_updates.py; under
        # no_grad the bases of views, detached ones too, are among the arguments' targets)
        given = (*args, *kwargs.values())
        no_grad_targets = (
            grad_requiring_args(self, given)
            if not grad_enabled
            else detached_alias_bases(self, given)
        )
        self.generators.enter_call()
        try:
            with self._collecting(frame), answering_grad_flags(self, func):
                # (a layout reader reads what a copy does not keep from the user's tensor)
                out = run(*as_the_user_reads(self.given, func, args), **kwargs)
        except CaptureError:
            raise
        except Exception as e:
            if _is_data_dependent(e):
                raise CaptureError(
                    f"{_call_name(func)} at {where(source, self.module_path)} needs the value "
                    "of a tensor, and fake=True traces without values. Trace with fake=False "
                    "(real tensors), or avoid data-dependent Python control flow here "
                    "(`if x.sum() > 0`, `.item()`, boolean-mask indexing).",
                    op=_call_name(func),
                    source=source,
                    module_path=self.module_path,
                ) from e
            raise CaptureError(
                f"{_call_name(func)} failed at {where(source, self.module_path)}: "
                f"{type(e).__name__}: {e}",
                op=_call_name(func),
                source=source,
                module_path=self.module_path,
            ) from e
        finally:
            self._source = outer_source
            self.generators.exit_call()
        reads = reads_values(func)  # `.tolist()`, `torch.equal`: no ATen op to see
        if not frame.bsyms and not reads:
            self._alias_unknown_outputs(out, args)
            return out
        sym = _INNER_GRAD_SYMBOL if run is not func else torch_symbol(func)
        bsym = BoundSymbol(
            sym=sym or _opaque_symbol(func),
            args=p_args,
            kwargs=p_kwargs,
            output=self.proxify(out),
            subsymbols=frame.bsyms,
            origin=Origin(source, self.module_path),
        )
        if not grad_enabled or frame.without_grad:
            bsym.tags.add(BsymTag.NO_GRAD)
        changed_settings = self._under_changed_settings(func, source)
        if sym is None or run is not func or frame.subsymbols_read or changed_settings:
            # no public name to call (or none that runs on the trace's tensors, or a value
            # made inside is read from outside, or one whose ops follow settings the program
            # changed, core/dispatch_settings.py): its ATen ops are the code
            bsym.tags.add(BsymTag.FUNCTIONALIZED)
        elif frame.mutated:
            functional = functional_method_name(sym)
            twin = (
                torch_symbol(getattr(torch.Tensor, functional))
                if functional is not None and not frame.mutated_views
                else None
            )
            if twin is not None:
                bsym.sym = twin
                bsym.header = f"in-place {sym.name}() recorded functionally"
            else:
                bsym.tags.add(BsymTag.FUNCTIONALIZED)
        if reads or any(BsymTag.DATA_DEPENDENT in s.tags for s in frame.bsyms):
            bsym.tags.add(BsymTag.DATA_DEPENDENT)
            self.data_dependent.append(bsym)
        if autocast_enabled():
            for cast in hoist_autocast_casts(bsym):  # autocast's casts as calls of their own
                self._append(cast)
        self._append(bsym)
        self._after_call(out, kwargs, no_grad_targets)
        return out

    def _after_call(self, out: Any, kwargs: dict[str, Any], no_grad_targets: list[Any]) -> None:
        """What a recorded call changes beyond its values: no_grad updates of tensors that need
        a gradient; a new leaf (`torch.zeros_like(x, requires_grad=True)`)."""
        if no_grad_targets:
            reattach_no_grad_updates(self, no_grad_targets)
        if kwargs.get("requires_grad") is True and isinstance(out, torch.Tensor):
            made_a_leaf(self, out, True)

    def _alias_unknown_outputs(self, out: Any, args: tuple[Any, ...]) -> None:
        """A torch-level call with no ATen ops returned a tensor we have not seen (`x.data`):
        it shares its input's value."""
        first = next((a for a in pytree.tree_leaves(args) if isinstance(a, torch.Tensor)), None)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and id(t) not in self._proxies and first is not None:
                self.bind(t, self.proxy_of(first))

    # --- ATen level -------------------------------------------------------------------
    def on_dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if is_collective_op(func):
            return record_collective_op(self, func, args, kwargs)
        if self.unfilled:  # values a kernel copied in where no mode sees (capture/host_filled.py)
            settle_host_filled(self, func, args, kwargs)
        p_args, p_kwargs = self.proxify((args, kwargs))
        if has_registered_autograd(func) and self._wants_grad(func, p_args, p_kwargs):
            return record_custom_op_call(self, func, args, kwargs)  # its own backward
        writes = mutated_arg_indices(func)
        if writes and self.outside:
            note_outside_write(self, func, args, kwargs)
        out = func(*args, **kwargs)
        if func is aten._local_scalar_dense.default:
            proxy = NumberProxy(name=self.names.fresh("n"), value=out)
            bsym = self._bsym(func, p_args, p_kwargs, proxy)
            bsym.tags.add(BsymTag.DATA_DEPENDENT)
            self._append(bsym)
            return out
        # a no_grad the torch-level call around this op entered itself (gaussian_nll_loss
        # clamps a copy of its variance so): autograd records nothing of what runs in it
        frame = self._frames[-1]
        inner_no_grad = frame.called_with_grad and not torch.is_grad_enabled()
        recorded = len(frame.bsyms)
        if writes:
            behind_autograd = self._updated_behind_autograd(func, args, kwargs, inner_no_grad)
            self._record_mutation(func, args, kwargs, p_args, p_kwargs, out)
            if inner_no_grad:
                _no_grad_from(frame, recorded)
            if behind_autograd:
                with self.dispatch_mode:  # (off the stack in here) records the reattaching
                    reattach_no_grad_updates(self, behind_autograd)
            if self.unfilled:
                forget_written(self)
        else:
            self._record_functional(func, args, kwargs, p_args, p_kwargs, out)
            if inner_no_grad:
                _no_grad_from(frame, recorded)
            if func in EMPTY_FACTORIES or self.unfilled:
                note_unfilled(self, func, args, out)
        return out

    def _updated_behind_autograd(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], inner_no_grad: bool
    ) -> list[tuple[torch.Tensor, Any]]:
        """The tensors requiring grad that an in-place ATen op updates under a no_grad the
        torch-level call around it entered itself (one entered outside it is that call's to
        handle, `_after_call`)."""
        if not inner_no_grad:
            return []
        return grad_requiring_args(self, mutated_tensors(func, args, kwargs))

    def _record_functional(
        self, func: Any, args: Any, kwargs: Any, p_args: Any, p_kwargs: Any, out: Any
    ) -> None:
        input_ids = {id(t) for t in leaves((args, kwargs), []) if isinstance(t, torch.Tensor)}
        wants_grad = self._wants_grad(func, p_args, p_kwargs)
        # most ops return one tensor: no pytree spec to make and unflatten
        flat, spec = ([out], None) if isinstance(out, torch.Tensor) else pytree.tree_flatten(out)
        fresh = False
        proxied = []
        for t in flat:
            if not isinstance(t, torch.Tensor):
                proxied.append(t)
            elif id(t) in input_ids:
                proxied.append(self.proxy_of(t))  # returned an input as it is (lift_fresh)
            else:
                fresh = True
                proxied.append(self._new_proxy(t, wants_grad))
        if not fresh:
            return
        output = proxied[0] if spec is None else pytree.tree_unflatten(proxied, spec)
        bsym = self._bsym(func, p_args, p_kwargs, output)
        if has_data_dependent_size(func, args):
            bsym.tags.add(BsymTag.DATA_DEPENDENT)  # a size this run's values chose
        if is_view_op(func) and args and isinstance(args[0], torch.Tensor):
            tensors = [t for t in flat if isinstance(t, torch.Tensor)]
            for i, view in enumerate(tensors):
                self._register_view(func, args, kwargs, p_args, p_kwargs, i, view)
        self._expand(bsym, func, args, kwargs)
        self._append(bsym)


def _no_grad_from(frame: Frame, start: int) -> None:
    """Tag the bound symbols `frame` got from `start` on as run without grad: autodiff sends
    no gradient through them, as autograd recorded none (their outputs need none)."""
    for bsym in frame.bsyms[start:]:
        bsym.tags.add(BsymTag.NO_GRAD)


def _call_name(func: Callable[..., Any]) -> str:
    sym = torch_symbol(func)
    if sym is not None:
        return f"torch.Tensor.{sym.name}" if sym.kind.value in ("method", "attribute") else sym.name
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))


def _opaque_symbol(func: Callable[..., Any]) -> Symbol:
    name = _call_name(func)
    return Symbol(name=name, id=name, fn=func)


class _FunctionMode(TorchFunctionMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        return self.recorder.on_torch_function(func, args, kwargs or {})


class _DispatchMode(DynamoSafeDispatchMode):
    records_program = True

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def on_dispatch(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        return self.recorder.on_dispatch(func, args, kwargs)
