"""The reverse sweep over repeated blocks: one block's rule runs written out for the next.

Twelve identical transformer blocks make twelve runs of the same rules on other proxies.
The sweep (autodiff/vjp.py) goes through the units of one block at a time (consecutive
units whose top-level bound symbol's module path has the same `<container>.<index>`
prefix, e.g. `blocks.3`) and keeps what each block's sweep made: its augmented-forward
segments, backward bound symbols, cotangent updates, rule applications and the fresh
names it drew. A later block whose units are the same bound symbols on other proxies (the
same symbols, arguments, tags, sources and rules, module paths moved) and that starts
from the same boundary (which of its proxies need a gradient, which already have a
cotangent) is written out from that record: the same bound symbols renamed, fresh names
drawn in the order the record drew them, module paths and the forward ops they came
from moved to the block.

As in capture's block stamping, a record is used only after it proved itself: the block
swept after it, for real, must equal the record written out for it, bound symbol for bound
symbol. Anything else (another block, the step recorder of the debugger running, a name
claimed rather than drawn) is swept unit by unit.

Whether a block is the same bound symbols as a record on other proxies takes a walk of
every bound symbol in it (`_shape`), except where capture wrote both out from one recording
(`WrittenOut`): then capture's renamings say which proxy is which, and the walk is skipped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from thunderviz.autodiff.sweep_log import Contribution, RuleApplication
from thunderviz.capture.rewriting import (
    WrittenOut,
    drawn_since,
    fingerprints,
    map_proxies,
    proxies_in,
    proxy_meta,
    rewritten,
    swap,
)
from thunderviz.core.proxies import Proxy
from thunderviz.core.symbol import BoundSymbol

__all__ = ["SweepState", "sweep_blocks", "tagged"]


@dataclass
class SweepState:
    """What the reverse sweep builds, shared by its unit-by-unit and its written-out parts."""

    names: Any
    needs: set[str]
    cts: dict[str, Proxy]
    fwd_segments: list[list[BoundSymbol]]
    bwd: list[BoundSymbol]
    applications: list[RuleApplication]
    recorder: Any
    ct_log: list[tuple[str, Proxy]] = field(default_factory=list)  # cts[name] = proxy, in order
    # op outputs a grad rule made differently, by name: their op (vjp._place)
    unmade: dict[str, BoundSymbol] = field(default_factory=dict)
    # values a backward traced inside the program reads, whose cotangents its ops gave
    # (a gradient of a gradient: vjp._check_cotangents_read)
    read_by_inner_grads: set[str] = field(default_factory=set)
    # outputs whose gradient goes through a hook point, by name (autodiff/output_hooks.py)
    hook_points: dict[str, int] = field(default_factory=dict)


def tagged(bsym: BoundSymbol, unit: Any) -> BoundSymbol:
    """Link a bound symbol a rule produced to the forward op it came from (for the UI)."""
    return bsym.with_changes(fwd_bsym=unit.top, origin=unit.bsym.origin)


@dataclass
class _Record:
    """One block's sweep, in the terms needed to write it out for another block."""

    units: list[Any]
    path: str
    proxies: list[Proxy]  # every proxy its units mention, in walk order (repeats kept)
    skeleton: list[Any]  # its units' bound symbols with proxies as their metadata
    start_cts: dict[str, Proxy | None]  # their cotangents when its sweep began
    drawn: dict[str, list[str]]  # prefix -> fresh names drawn, in order
    fwd: list[list[BoundSymbol]]  # per unit: its augmented-forward segment
    bwd: list[BoundSymbol]
    ct_log: list[tuple[str, Proxy]]
    apps: list[RuleApplication]
    written: WrittenOut | None  # what capture says its block is (`_written_out`)

    @cached_property
    def made(self) -> dict[str, Proxy]:
        """The proxies its sweep made, by name (the same for every block written out)."""
        return _made_proxies(self)


SweepUnit = Callable[[SweepState, list[Any], int], None]


def sweep_blocks(
    units: list[Any],
    state: SweepState,
    sweep_unit: SweepUnit,
    written_out: Sequence[WrittenOut] = (),
) -> None:
    """Run `sweep_unit(state, units, i)` for every unit, last first, writing out repeated
    blocks from a proven record instead where one applies. `written_out`: the trace's
    blocks capture wrote out (`trace.meta["written_out"]`)."""
    first_of = {id(w.bsyms[0]): w for w in written_out if w.bsyms}
    candidates: dict[Any, _Record] = {}  # the last block swept for real, per op sequence
    proven: dict[Any, list[_Record]] = {}
    blocks = [
        (start, end, path, None if path is None else _key(units[start:end], state.hook_points))
        for start, end, path in reversed(_blocks(units))
    ]
    # blocks still to come per key: a block none of them can be written out from is swept
    # without being recorded (recording walks every nested bound symbol)
    to_come = Counter(key for *_, key in blocks)
    for start, end, path, key in blocks:
        to_come[key] -= 1
        if path is None or state.recorder is not None or (not to_come[key] and key not in proven):
            for i in range(end - 1, start - 1, -1):
                sweep_unit(state, units, i)
            continue
        block = units[start:end]
        written = _written_out(block, path, first_of)
        if _stamped(proven.get(key, ()), block, start, path, state, written):
            continue
        new = _recorded(units, start, end, path, state, sweep_unit, written)
        candidate = candidates.pop(key, None)
        if new is None:
            continue
        if candidate is not None:
            mapping = _mapping(candidate, block, path, new.start_cts, state.needs, written)
            if (
                mapping is not None
                and _counts(candidate.drawn) == _counts(new.drawn)
                and _same(_written(candidate, block, path, mapping, new.drawn), new)
            ):
                proven.setdefault(key, []).append(new)
        candidates[key] = new


def _key(block: list[Any], hook_points: Mapping[str, int]) -> Any:
    """What blocks that may be written out from one another share: their units' ops, rules
    and output shapes, and which of their outputs have a hook point (autodiff/output_hooks.py;
    their full comparison, `_mapping`, looks at far more)."""
    return tuple(
        (
            u.bsym.sym.id,
            u.joint,
            tuple((proxy_meta(p), p.name in hook_points) for p in u.bsym.flat_tensor_outs),
        )
        for u in block
    )


def _stamped(
    records: Any,
    block: list[Any],
    start: int,
    path: str,
    state: SweepState,
    written: WrittenOut | None,
) -> bool:
    """Write the block out from the first proven record that applies to it, if any."""
    for record in records:
        mapping = _mapping(record, block, path, state.cts, state.needs, written)
        if mapping is not None:  # names are drawn only now: a refusal draws none
            drawn = {p: [state.names.fresh(p) for _ in v] for p, v in record.drawn.items()}
            _apply(_written(record, block, path, mapping, drawn), start, state)
            return True
    return False


def _blocks(units: list[Any]) -> list[tuple[int, int, str | None]]:
    """Consecutive units grouped by the block their top-level op ran in (None: no block)."""
    out: list[tuple[int, int, str | None]] = []
    for i, unit in enumerate(units):
        path = _block_path(unit.top.module_path)
        if out and out[-1][2] == path:
            out[-1] = (out[-1][0], i + 1, path)
        else:
            out.append((i, i + 1, path))
    return out


def _written_out(
    block: list[Any], path: str, first_of: Mapping[int, WrittenOut]
) -> WrittenOut | None:
    """The write-out whose bound symbols are exactly the block's top-level ones, if any."""
    tops = list({id(u.top): u.top for u in block}.values())
    written = first_of.get(id(tops[0]))
    if (
        written is None
        or written.path != path
        or len(written.bsyms) != len(tops)
        or any(a is not b for a, b in zip(written.bsyms, tops, strict=True))
    ):
        return None
    return written


def _block_path(module_path: str) -> str | None:
    parts = module_path.split(".")
    for k, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: k + 1])
    return None


def _shape(units: list[Any], path: str) -> tuple[list[Proxy], list[Any]]:
    """The proxies the units' bound symbols mention (walk order, repeats kept) and what is
    left of them without the proxies' names: everything a fingerprint shows, module paths
    relative to the block. Compared as values, without printing (this runs per block)."""
    proxies: list[Proxy] = []
    skeleton: list[Any] = []
    for unit in units:
        for b in unit.bsym.walk():
            where = b.module_path
            inside = where == path or where.startswith(path + ".")
            skeleton.append(
                (
                    b.sym.id,
                    _masked(b.args, proxies),
                    _masked(b.kwargs, proxies),
                    _masked(b.output, proxies),
                    b.source,
                    where[len(path) :] if inside else ("outside", where),
                    frozenset(b.tags),
                    b.header,
                    len(b.subsymbols),
                )
            )
    return proxies, skeleton


def _masked(x: Any, proxies: list[Proxy]) -> Any:
    """`x` with each proxy replaced by its metadata (and appended to `proxies`)."""
    return map_proxies(x, lambda p: proxies.append(p) or proxy_meta(p))


def _recorded(
    units: list[Any],
    start: int,
    end: int,
    path: str,
    state: SweepState,
    sweep_unit: SweepUnit,
    written: WrittenOut | None,
) -> _Record | None:
    """Sweep units[start:end] for real; their record, or None where it cannot be reused."""
    names = state.names
    block = units[start:end]
    proxies, skeleton = _shape(block, path)
    start_cts = {p.name: state.cts.get(p.name) for p in proxies}
    taken, counters = set(names.taken), dict(names._counters)
    n_bwd, n_apps, n_log = len(state.bwd), len(state.applications), len(state.ct_log)
    for i in range(end - 1, start - 1, -1):
        sweep_unit(state, units, i)
    drawn = drawn_since(names, taken, counters)
    if drawn is None:
        return None
    record = _Record(
        block,
        path,
        proxies,
        skeleton,
        start_cts,
        drawn,
        state.fwd_segments[start:end],
        state.bwd[n_bwd:],
        state.ct_log[n_log:],
        state.applications[n_apps:],
        written,
    )
    inside = (path, path + ".")
    made = [b for seg in record.fwd for x in seg for b in x.walk()]
    made += [b for x in record.bwd for b in x.walk()]
    if not all(b.module_path == path or b.module_path.startswith(inside[1]) for b in made):
        return None
    return record


def _mapping(
    record: _Record,
    block: list[Any],
    path: str,
    cts: Mapping[str, Proxy | None],
    needs: set[str],
    written: WrittenOut | None,
) -> dict[str, Proxy] | None:
    """Record's names -> this block's proxies: its units' proxies by position and their
    cotangents at the start; None where the blocks' ops or their boundaries differ.
    `written`: what capture says the block is (`_written_out`)."""
    if [u.joint for u in block] != [u.joint for u in record.units] or _tops(block) != _tops(
        record.units
    ):
        return None
    pairs = _renamed(record.written, written)
    if pairs is None:
        theirs, skeleton = _shape(block, path)
        if skeleton != record.skeleton:
            return None  # other ops, shapes, dtypes, arguments, tags or sources
        pairs = zip(record.proxies, theirs, strict=True)
    mapping: dict[str, Proxy] = {}
    back: dict[str, str] = {}
    for old, new in pairs:
        if mapping.setdefault(old.name, new).name != new.name:
            return None
        if back.setdefault(new.name, old.name) != old.name:
            return None
        if (old.name in needs) != (new.name in needs):
            return None
    for old_name, old_ct in record.start_cts.items():
        if old_name not in mapping:
            return None
        new_ct = cts.get(mapping[old_name].name)
        if (old_ct is None) != (new_ct is None):
            return None
        if (
            old_ct is not None
            and new_ct is not None  # both or neither, above
            and mapping.setdefault(old_ct.name, new_ct).name != new_ct.name
        ):
            return None
    return mapping


def _renamed(
    ours: WrittenOut | None, theirs: WrittenOut | None
) -> Iterable[tuple[Proxy, Proxy]] | None:
    """(our proxy, theirs) for every proxy of two write-outs of one recording: the same
    bound symbols as each other on these proxies, with no walk. None where capture does not
    say so (then `_shape` compares the blocks)."""
    if ours is None or theirs is None or ours.recording is not theirs.recording:
        return None
    if ours.renaming.keys() != theirs.renaming.keys():
        return None
    return [(p, theirs.renaming[name]) for name, p in ours.renaming.items()]


def _counts(drawn: dict[str, list[str]]) -> dict[str, int]:
    return {prefix: len(names) for prefix, names in drawn.items()}


def _tops(block: list[Any]) -> list[int]:
    """Which top-level op each unit belongs to, as positions among the block's."""
    seen: dict[int, int] = {}
    return [seen.setdefault(id(u.top), len(seen)) for u in block]


def _made_proxies(record: _Record) -> dict[str, Proxy]:
    fresh = {n for names in record.drawn.values() for n in names}
    found: list[Proxy] = []
    for x in [*(x for seg in record.fwd for x in seg), *record.bwd]:
        for b in x.walk():
            found += b.flat_proxy_args
            found += b.flat_proxy_outs
    proxies_in([ct for _, ct in record.ct_log], found)
    return {p.name: p for p in found if p.name in fresh}


@dataclass
class _Written:
    fwd: list[list[BoundSymbol]]
    bwd: list[BoundSymbol]
    ct_log: list[tuple[str, Proxy]]
    apps: list[RuleApplication]
    drawn: dict[str, list[str]]


def _written(
    record: _Record,
    block: list[Any],
    path: str,
    mapping: dict[str, Proxy],
    drawn: dict[str, list[str]],
) -> _Written:
    """The record written out for `block`, with `mapping` (from `_mapping`) and the fresh
    names `drawn` for it, per prefix in the order the record drew its own."""
    mapping = dict(mapping)
    made = record.made
    for prefix, olds in record.drawn.items():
        for old, new in zip(olds, drawn.get(prefix, ()), strict=True):
            if old in made:
                mapping[old] = made[old].renamed(new)
    cut = len(record.path)
    tops = {id(u.top): new.top for u, new in zip(record.units, block, strict=True)}
    bsyms = {id(u.bsym): new.bsym for u, new in zip(record.units, block, strict=True)}

    def moved(x: BoundSymbol) -> BoundSymbol:
        y = rewritten(x, mapping, cut, path)
        if x.fwd_bsym is not None:
            y.fwd_bsym = tops.get(id(x.fwd_bsym))
        return y

    fwd = []
    for seg, old, new in zip(record.fwd, record.units, block, strict=True):
        fwd.append([_forward(x, old, new, moved) for x in seg])
    apps = [
        RuleApplication(
            tops[id(a.top)],
            bsyms[id(a.bsym)],
            tuple(_name(n, mapping) for n in a.emitted),
            {_name(k, mapping): _name(v, mapping) for k, v in a.read.items()},
            tuple(
                Contribution(
                    _name(c.x, mapping),
                    _name(c.grad, mapping),
                    None if c.old is None else _name(c.old, mapping),
                    _name(c.total, mapping),
                )
                for c in a.contributions
            ),
        )
        for a in record.apps
    ]
    return _Written(
        fwd,
        [moved(x) for x in record.bwd],
        [(_name(n, mapping), swap(ct, mapping)) for n, ct in record.ct_log],
        apps,
        drawn,
    )


def _forward(x: BoundSymbol, old: Any, new: Any, moved: Callable[..., Any]) -> BoundSymbol:
    """A forward segment's bound symbol for the new block: the op itself where the record
    kept the op itself (tagged or not), else the rule's code moved."""
    if x is old.bsym:
        return new.bsym
    if x.args is old.bsym.args and x.output is old.bsym.output:
        return tagged(new.bsym, new)
    return moved(x)


def _name(name: str, mapping: dict[str, Proxy]) -> str:
    p = mapping.get(name)
    return name if p is None else p.name


def _apply(written: _Written, start: int, state: SweepState) -> None:
    for k, seg in enumerate(written.fwd):
        state.fwd_segments[start + k] = seg
    state.bwd.extend(written.bwd)
    for name, ct in written.ct_log:
        state.cts[name] = ct
    state.ct_log.extend(written.ct_log)
    state.applications.extend(written.apps)


def _same(written: _Written, record: _Record) -> bool:
    """The record written out equals the block's own sweep, bound symbol for bound symbol
    (and the forward ops they point at, and what the sweep log says)."""
    return (
        [fingerprints(seg) for seg in written.fwd] == [fingerprints(seg) for seg in record.fwd]
        and [[_links(x) for x in seg] for seg in written.fwd]
        == [[_links(x) for x in seg] for seg in record.fwd]
        and fingerprints(written.bwd) == fingerprints(record.bwd)
        and [_links(x) for x in written.bwd] == [_links(x) for x in record.bwd]
        and [(n, repr(ct)) for n, ct in written.ct_log]
        == [(n, repr(ct)) for n, ct in record.ct_log]
        and written.apps == record.apps
    )


def _links(x: BoundSymbol) -> list[int]:
    return [id(b.fwd_bsym) for b in x.walk()]
