"""core/rng.py: the generators' state, restored and compared."""

from __future__ import annotations

import torch

from thunderviz.core.rng import RngState, preserved_rng


def test_a_state_is_the_same_as_another_until_something_draws() -> None:
    before = RngState()
    assert before.same_as(RngState())
    torch.empty(0).uniform_()  # draws nothing: no element
    assert before.same_as(RngState())
    torch.rand(3)
    after = RngState()
    assert not before.same_as(after)
    before.restore()
    assert before.same_as(RngState())


def test_preserved_rng_leaves_the_next_draw_as_it_was() -> None:
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    with preserved_rng():
        torch.rand(100)
    torch.testing.assert_close(torch.rand(4), expected)
