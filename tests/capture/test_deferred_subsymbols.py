"""Decompositions built when first read (BoundSymbol.defer_subsymbols): a trace whose
decomposed ops' subsymbols are built late, after passes, copies and other traces ran, is the
trace whose subsymbols were built at once, at every level; jit's first call does not build
them; a copy holds them built."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from tests.capture.test_decomposition_cache import _cross_entropy, _gpt, _hf_gpt2, described
from thunderviz.core.symbol import BoundSymbol


class _ConvBN(nn.Module):
    """BatchNorm in training (native_batch_norm is decomposed) and dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.bn2 = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x, y):
        h = F.dropout(self.bn2(torch.relu(self.bn(self.conv(x)))), 0.2)
        return F.cross_entropy(self.fc(h.flatten(1)), y)


def _conv_bn():
    torch.manual_seed(0)
    return _ConvBN().double(), (
        torch.randn(5, 3, 8, 8, dtype=torch.double),
        torch.tensor([0, 2, 1, 1, 0]),
    )


def _deferred(trace: tv.Trace) -> list[BoundSymbol]:
    return [b for top in trace.bound_symbols for b in top.walk_outline() if _is_deferred(b)]


def _is_deferred(b: BoundSymbol) -> bool:
    return "subsymbols" not in vars(b)


PROGRAMS = [_conv_bn, _cross_entropy, _gpt, _hf_gpt2]
IDS = ["conv-bn", "ce", "gpt", "hf"]


@pytest.mark.parametrize("make", PROGRAMS, ids=IDS)
def test_subsymbols_built_late_are_those_built_at_once(make):
    model, args = make()
    torch.manual_seed(1)
    at_once = described(tv.trace(model, *args))
    torch.manual_seed(1)
    late = tv.trace(model, *args)
    assert _deferred(late)
    tv.autodiff(late)  # passes read the trace first
    copied = copy.deepcopy(late)
    assert not _deferred(copied)
    other, other_args = _cross_entropy()
    tv.trace(other, *other_args)  # another trace draws names of its own in between
    assert described(late) == at_once
    assert described(copied) == at_once


def test_jit_runs_without_building_a_decomposition_and_matches_eager():
    model, args = _conv_bn()
    eager = copy.deepcopy(model)
    jitted = tv.jit(model)
    torch.manual_seed(2)
    loss = jitted(*args)
    loss.backward()
    torch.manual_seed(2)
    expected = eager(*args)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-10, atol=1e-12, msg=name)
    for (name, b), c in zip(eager.named_buffers(), model.buffers(), strict=True):
        torch.testing.assert_close(c, b, rtol=1e-12, atol=1e-12, msg=name)
    (entry,) = [e for entries in jitted._cache.values() for e in entries]
    assert _deferred(entry.forward)  # the BatchNorms' decompositions were never needed


def test_renaming_deferred_subsymbols_uses_the_mapping_as_it_was():
    """rename() of a bound symbol whose subsymbols are not built yet keeps the mapping it was
    given, as an immediate rename would: a caller filling the dict afterwards changes
    nothing."""
    model, args = _conv_bn()
    trace = tv.trace(model, *args)
    top = next(b for b in trace.bound_symbols if any(map(_is_deferred, b.walk_outline())))
    holder = next(b for b in top.walk_outline() if _is_deferred(b))
    inner = holder.subsymbols  # builds this one: a reference for the rename
    name = inner[0].flat_proxy_outs[0].name
    other = next(p for p in trace.flat_args if p.name not in {name})
    mapping = {name: other.renamed("renamed_value")}
    again = tv.trace(model, *args)
    holder2 = [b for b in again.bound_symbols for b in b.walk_outline() if _is_deferred(b)][0]
    renamed = holder2.rename(mapping)
    mapping[name] = other.renamed("too_late")
    outs = [p.name for b in renamed.subsymbols for p in b.flat_proxy_outs]
    assert "renamed_value" in outs and "too_late" not in outs
    assert _is_deferred(holder2)  # renaming built nothing of the original
