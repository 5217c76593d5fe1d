"""The viewer's ids and the Python objects they name, both ways.

The browser names an op `"forward:3"` (`"forward:0.1"` for a subsymbol), a tensor by its
name and a module `"module:<path>"`. `ViewIndex` maps such an id to the real object of a
Session (a `BoundSymbol`, a `Proxy`, an `nn.Module`) or, for a widget made from a bare
document, to the document's own entry, and an object back to its id.

The widget's `selected` trait holds the object and travels as its id: `Selection` keeps the
id beside the object (ipywidgets' `to_json` / `from_json` serializers read and write it),
so an id goes back to the browser exactly as it came, even one that names nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
import traitlets

from thunderviz.core.proxies import Proxy
from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace
from thunderviz.debug.session import Session
from thunderviz.debug.steps import StepRecord
from thunderviz.viz.protocol import module_id, module_path_of, op_id, parse_op_id, trace_kind_of

__all__ = ["SelectedTrait", "Selection", "ViewIndex", "WireId", "session_traces"]


class WireId(str):
    """An id as the browser sent it: taken as it is, even when it names nothing here."""


def session_traces(s: Session | None) -> dict[str, Trace]:
    """The traces of a session by the trace kind its op ids use."""
    if s is None:
        return {}
    traces: dict[str, Trace] = {"forward": s.forward}
    if s.result is not None:
        traces["augmented_forward"] = s.result.augmented_forward
        traces["backward"] = s.result.backward
    for k, run in enumerate(s.transform_runs):
        if not any(run.before is t for t in traces.values()):
            traces[f"transform{k}"] = run.before
    return traces


class ViewIndex:
    """Ids the document knows (ops, tensors, modules) and the session's objects by id."""

    def __init__(self, document: Mapping[str, Any], session: Session | None) -> None:
        self.session = session
        self.ops: dict[str, dict[str, Any]] = {}
        self.tensors: dict[str, dict[str, Any]] = {}
        self.modules: set[str] = set()
        for kind, tv in (document.get("traces") or {}).items():
            for op in tv.get("ops", []):
                self.ops[op["id"]] = op
                path = op.get("module_path") or ""
                while path:
                    self.modules.add(path)
                    path = path.rpartition(".")[0]
            for name, t in (tv.get("tensors") or {}).items():
                self.tensors.setdefault(name, {**t, "trace": kind})
        for run in document.get("transforms") or []:
            for op in (run.get("trace_before") or {}).get("ops", []):
                self.ops.setdefault(op["id"], op)
        self.bsym_ids: dict[int, str] = {}
        self.proxies: dict[str, Proxy] = {}
        self.traces = session_traces(session)
        for kind, tr in self.traces.items():
            for i, b in enumerate(tr.bound_symbols):
                _walk_ids(b, kind, (i,), self.bsym_ids)
            for p in tr.flat_args:
                if isinstance(p, Proxy):
                    self.proxies.setdefault(p.name, p)
            for b in tr.walk():
                for p in (*b.flat_proxy_outs, *b.flat_proxy_args):
                    self.proxies.setdefault(p.name, p)

    def _root_module(self) -> torch.nn.Module | None:
        fn = self.session.fn if self.session is not None else None
        return fn if isinstance(fn, torch.nn.Module) else None

    def resolve(self, ident: str) -> Any:
        """The object an id of the viewer names: a BoundSymbol (an op), a Proxy (a tensor),
        an nn.Module (a module; its path when the program is a function), or the document's
        entry for a widget without a session; None if it names nothing."""
        if not ident:
            return None
        path = module_path_of(ident)
        if path is not None:
            root = self._root_module()
            if root is not None:
                try:
                    return root.get_submodule(path) if path else root
                except AttributeError:
                    pass
            return path if path in self.modules or path == "" else None
        if ident in self.ops:
            if self.session is None:
                return self.ops[ident]
            bsym = _bsym_at(self.traces, ident)
            return bsym if bsym is not None else self.ops[ident]
        if ident in self.proxies:
            return self.proxies[ident]
        return self.tensors.get(ident)

    def id_of(self, obj: Any) -> str:
        """The viewer's id for a BoundSymbol, Proxy, nn.Module, StepRecord or id string."""
        if obj is None:
            return ""
        if isinstance(obj, str):
            if obj == "" or obj in self.ops or obj in self.tensors or obj in self.proxies:
                return obj
            path = module_path_of(obj)
            if path is not None and (path in self.modules or path == ""):
                return obj
            raise ValueError(
                f"{obj!r} is not an op id (like 'forward:3'), a tensor name or a "
                "module ('module:<path>') of this view"
            )
        if isinstance(obj, StepRecord):
            return obj.op_id
        if isinstance(obj, BoundSymbol):
            found = self.bsym_ids.get(id(obj))
            if found is None:
                raise ValueError(f"{obj!r} is not in this session's traces")
            return found
        if isinstance(obj, Proxy):
            if obj.name not in self.tensors and obj.name not in self.proxies:
                raise ValueError(f"{obj.name!r} is not a tensor of this view")
            return obj.name
        if isinstance(obj, torch.nn.Module):
            root = self._root_module()
            if root is not None:
                for path, m in root.named_modules():
                    if m is obj:
                        return module_id(path)
            raise ValueError(f"this {type(obj).__name__} is not a module of the traced model")
        raise TypeError(
            f"cannot select a {type(obj).__name__}: pass a BoundSymbol, a Proxy, "
            "an nn.Module or an id string"
        )

    def ids_of(self, objs: Iterable[Any]) -> list[str]:
        """Ids of these objects (or lists of them; None skipped), each once, in order. A
        `WireId` is kept as it is."""
        ids: list[str] = []
        for obj in objs:
            items = obj if isinstance(obj, (list, tuple, set)) else [obj]
            ids.extend(
                x if isinstance(x, WireId) else self.id_of(x) for x in items if x is not None
            )
        return [str(i) for i in dict.fromkeys(i for i in ids if i)]

    def steppable_op(self, ident: str) -> str:
        """A backward or forward op id for `ident` (an op id or a tensor name): what the
        stepper can run to or break on."""
        op = self.ops.get(ident)
        if op is None:
            tensor = self.tensors.get(ident)
            producer = tensor.get("producer") if tensor else None
            if not producer:
                raise ValueError(f"{ident!r} is an input: no backward step produces it")
            op = self.ops.get(producer)
            if op is None:
                raise ValueError(f"the producer of {ident!r} is not in this view")
        if trace_kind_of(op["id"]) in ("backward", "forward"):
            return op["id"]
        if op.get("fwd_op"):
            return op["fwd_op"]
        raise ValueError(f"{op['id']} belongs to no forward op, so no backward step runs it")


class SelectedTrait(traitlets.Any):
    """The `selected` trait: any object, None included, and every value goes through the
    widget's validator (traitlets skips it for None where None is allowed), which keeps the
    id that travels in `Selection`."""

    allow_none = False


class Selection:
    """The id of what the `selected` trait holds (the trait holds the object)."""

    def __init__(self) -> None:
        self.ident = ""

    def accept(self, index: ViewIndex, value: Any) -> Any:
        """The object to store for `value` (an object, an id, or a `WireId` from the
        browser); remembers its id. Raises for an object or id this view does not know."""
        self.ident = str(value) if isinstance(value, WireId) else index.id_of(value)
        return index.resolve(self.ident)

    @staticmethod
    def from_json(value: Any, _widget: Any) -> WireId:
        return WireId(value or "")

    @staticmethod
    def to_json(_value: Any, widget: Any) -> str:
        return widget.selected_id


def _walk_ids(bsym: BoundSymbol, kind: str, path: tuple[int, ...], out: dict[int, str]) -> None:
    out.setdefault(id(bsym), op_id(kind, *path))
    for j, sub in enumerate(bsym.subsymbols):
        _walk_ids(sub, kind, (*path, j), out)


def _bsym_at(traces: Mapping[str, Trace], ident: str) -> BoundSymbol | None:
    parsed = parse_op_id(ident)
    if parsed is None or parsed[0] not in traces:
        return None
    kind, path = parsed
    items = traces[kind].bound_symbols
    bsym = None
    for i in path:
        if not 0 <= i < len(items):
            return None
        bsym = items[i]
        items = bsym.subsymbols
    return bsym
