"""Data-dependent selection: boolean masks (`x[mask]`, `x[mask] = v`, `masked_select`,
`masked_scatter`, `index_put` with a mask, `nonzero`) differentiated against torch.autograd
in float64, and a loss-masking model trained through thunderviz.jit like eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.idioms_training import train_like_eager
from tests.helpers import check_vjp

D = torch.float64


def _setitem(x, mask, v):
    y = x * 1.5
    y[mask] = v
    return y


def _setitem_scalar(x, mask):
    y = x.clone()
    y[mask] = 0.25
    return y.exp()


def _setitem_rows(x, rows, v):
    y = x.clone()
    y[rows] = v  # v broadcast over the selected rows
    return y


CASES = {
    "getitem": (lambda x, m: x[m] * 2, lambda: (torch.randn(4, 5, dtype=D), torch.randn(4, 5) > 0)),
    "getitem_rows": (
        lambda x, m: x[m, 1:].sin(),
        lambda: (torch.randn(4, 5, dtype=D), torch.tensor([True, False, True, True])),
    ),
    "getitem_middle_dims": (
        lambda x, m: x[:, m],
        lambda: (torch.randn(2, 3, 4, dtype=D), torch.randn(3, 4) > 0),
    ),
    "getitem_uint8": (
        lambda x, m: x[m.to(torch.bool)].cos(),
        lambda: (torch.randn(6, dtype=D), torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.uint8)),
    ),
    "setitem_values": (
        _setitem,
        lambda: (torch.randn(4, 5, dtype=D), torch.randn(4, 5) > 0.3, torch.randn(1, dtype=D)),
    ),
    "setitem_scalar": (
        _setitem_scalar,
        lambda: (torch.randn(4, 5, dtype=D), torch.randn(4, 5) > 0),
    ),
    "setitem_rows_broadcast": (
        _setitem_rows,
        lambda: (
            torch.randn(4, 3, dtype=D),
            torch.tensor([True, False, True, False]),
            torch.randn(3, dtype=D),
        ),
    ),
    "masked_select": (
        lambda x, m: torch.masked_select(x, m).pow(2),
        lambda: (torch.randn(4, 5, dtype=D), torch.randn(4, 5) > 0),
    ),
    "masked_select_broadcast": (
        lambda x, m: x.masked_select(m) * 3,
        lambda: (torch.randn(4, 5, dtype=D), torch.randn(5) > 0),
    ),
    "nonzero_positions": (
        lambda x, m: x[m.nonzero(as_tuple=True)] + 1,
        lambda: (torch.randn(3, 4, dtype=D), torch.randn(3, 4) > 0),
    ),
    "masked_scatter": (
        lambda x, m, s: x.masked_scatter(m, s) * 2,
        lambda: (torch.randn(4, 5, dtype=D), torch.randn(4, 5) > 0, torch.randn(30, dtype=D)),
    ),
    "index_put_mask": (
        lambda x, m, v: torch.index_put(x, (m,), v),
        lambda: (torch.randn(4, 5, dtype=D), torch.randn(4, 5) > 0, torch.randn(1, dtype=D)),
    ),
    "index_put_mask_accumulate": (
        lambda x, m, v: torch.index_put(x, (m,), v, accumulate=True),
        lambda: (torch.randn(4, 5, dtype=D), torch.randn(4) > -10, torch.randn(5, dtype=D)),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mask_selection_gradients_match_autograd(name):
    fn, make = CASES[name]
    torch.manual_seed(0)
    check_vjp(fn, *make())


def test_a_mask_selecting_nothing_gives_zero_gradients():
    x = torch.randn(3, 4, dtype=D)
    check_vjp(lambda x, m: x[m].sum() + x.sum(), x, torch.zeros(3, 4, dtype=torch.bool))


class _MaskedLoss(nn.Module):
    """Token classification where padding positions are left out of the loss (`loss[mask]`)
    and some hidden states are overwritten through a mask (`h[mask] = 0`)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 5)

    def forward(self, ids, labels):
        h = self.proj(self.embed(ids))
        h[ids == 0] = 0.0  # padding tokens carry nothing
        logits = self.head(torch.tanh(h))
        losses = F.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), reduction="none", ignore_index=-1
        )
        keep = labels.flatten() >= 0
        return losses[keep].mean() + logits[ids != 0].pow(2).mean() * 0.01


def _batches(pads: list[tuple[int, int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ids, labels) per step; `pads` gives each step's (first padded position, row)."""
    torch.manual_seed(0)
    out = []
    for start, row in pads:
        ids = torch.randint(1, 20, (2, 6))
        ids[row, start:] = 0
        out.append((ids, torch.where(ids == 0, -1, torch.randint(0, 5, (2, 6)))))
    return out


def test_loss_masking_model_trains_like_eager_with_masks_that_move():
    """Same number of kept tokens every step, at other places: the trace's `nonzero` finds
    them again on each call."""
    batches = _batches([(3, 1), (3, 0), (3, 1)])
    train_like_eager(_MaskedLoss(), lambda step: (batches[step], {}), lambda loss: loss)


def test_loss_masking_model_trains_like_eager_with_a_different_mask_count_each_step():
    """The number of kept tokens is a size the trace specialised on: jit's guards see it
    change and retrace."""
    batches = _batches([(3, 1), (1, 1), (5, 0)])
    jitted = train_like_eager(_MaskedLoss(), lambda step: (batches[step], {}), lambda loss: loss)
    assert jitted.cache_misses == 3


def test_masked_trace_shows_the_selection_by_positions():
    """The user's `x[mask]` stays in the trace; beneath it, nonzero and integer indexing."""
    x, m = torch.randn(4, 5, dtype=D, requires_grad=True), torch.randn(4, 5) > 0
    tr = tv.trace(lambda x, m: x[m].sum(), x, m)
    text = tr.python(print_depth=3)
    assert "aten.nonzero" in text and "aten.index.Tensor" in text
