"""A bound symbol's flat views (the unique proxies it reads and writes) are kept between reads
and follow its fields: a pass that gives it other arguments or outputs sees them, and no
caller can change what the next one reads."""

from __future__ import annotations

import copy

import torch

from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BoundSymbol, Symbol


def _proxy(name: str) -> TensorProxy:
    return TensorProxy(name=name, shape=(2,), dtype=torch.float32)


def _add(a, b, out) -> BoundSymbol:
    sym = Symbol(name="aten.add.Tensor", id="aten.add.Tensor", fn=torch.ops.aten.add.Tensor)
    return BoundSymbol(sym=sym, args=(a, b), kwargs={"alpha": 1}, output=out)


def _names(proxies) -> list[str]:
    return [p.name for p in proxies]


def test_flat_views_follow_replaced_fields():
    a, b, c, out = _proxy("a"), _proxy("b"), _proxy("c"), _proxy("out")
    bsym = _add(a, b, out)
    assert _names(bsym.flat_proxy_args) == ["a", "b"]
    assert _names(bsym.flat_proxy_outs) == ["out"]
    bsym.args = (a, c)  # what capture/autocast.py does to a call it casts
    assert _names(bsym.flat_proxy_args) == ["a", "c"]
    bsym.kwargs = {"alpha": 1, "other": b}
    assert _names(bsym.flat_proxy_args) == ["a", "c", "b"]
    bsym.output = (out, c)
    assert _names(bsym.flat_proxy_outs) == ["out", "c"]
    assert _names(bsym.flat_tensor_outs) == ["out", "c"]


def test_a_caller_changing_its_list_changes_nothing_else():
    bsym = _add(_proxy("a"), _proxy("a"), _proxy("out"))
    first = bsym.flat_proxy_args
    assert _names(first) == ["a"]  # one value read twice
    first.append(_proxy("x"))
    bsym.flat_proxy_outs.clear()
    assert _names(bsym.flat_proxy_args) == ["a"]
    assert _names(bsym.flat_proxy_outs) == ["out"]


def test_a_copy_reads_its_own_fields():
    bsym = _add(_proxy("a"), _proxy("b"), _proxy("out"))
    assert _names(bsym.flat_proxy_args) == ["a", "b"]
    copied = copy.deepcopy(bsym)
    copied.args = (_proxy("z"), copied.args[1])
    assert _names(copied.flat_proxy_args) == ["z", "b"]
    assert _names(bsym.flat_proxy_args) == ["a", "b"]
    assert _names(bsym.with_changes(output=_proxy("o2")).flat_proxy_outs) == ["o2"]
