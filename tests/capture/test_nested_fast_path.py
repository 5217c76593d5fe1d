"""`nn.TransformerEncoder` in eval mode with a key padding mask and no gradient to keep runs
eager's nested-tensor path, whose padded positions come out as zeros (or the final norm of
zeros); a trace cannot take that path, and gives the padded positions eager's values. Checked
against eager at every position, call after call, with masks that move (a mask that is not
left-aligned takes eager's standard path, and the jitted call traces again)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import thunderviz as tv


def _encoder(batch_first: bool, final_norm: bool) -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=batch_first)
    return nn.TransformerEncoder(
        layer, 2, norm=nn.LayerNorm(8) if final_norm else None, enable_nested_tensor=True
    ).eval()


MASKS = [
    [[False, False, True, True], [False, False, False, True]],  # left-aligned: nested path
    [[False, False, False, False], [False, True, True, True]],
    [[False, True, False, True], [False, False, False, True]],  # not left-aligned
]


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("final_norm", [False, True])
@pytest.mark.parametrize("float_mask", [False, True])
def test_padded_positions_are_eagers(batch_first, final_norm, float_mask):
    encoder = _encoder(batch_first, final_norm)
    jitted = tv.jit(encoder)
    for rows in MASKS:
        mask = torch.tensor(rows)
        if float_mask:
            mask = torch.zeros(mask.shape).masked_fill(mask, float("-inf"))
        x = torch.randn(2, 4, 8) if batch_first else torch.randn(4, 2, 8)
        with torch.no_grad():
            want = encoder(x, src_key_padding_mask=mask)
            got = jitted(x, src_key_padding_mask=mask)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_with_a_gradient_both_take_the_standard_path():
    encoder = _encoder(True, True)
    x = torch.randn(2, 4, 8, requires_grad=True)
    mask = torch.tensor(MASKS[0])
    want = encoder(x, src_key_padding_mask=mask)
    got = tv.jit(encoder)(x, src_key_padding_mask=mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got[0, 3].abs().sum() > 0  # padded, computed like the rest (as eager's)
