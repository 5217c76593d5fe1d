"""The grad rule of scaled_dot_product_attention (rules/attention.py), against
torch.autograd: OpInfo samples, causal / bool / float masks, fully masked rows, grouped-query
heads, and what the backward saves (never the L x S attention matrix).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_vjp

F64 = torch.float64


@pytest.mark.parametrize(
    "fn,args,kwargs",
    sample_params(
        ["nn.functional.scaled_dot_product_attention"], skip=lambda a, kw: kw.get("dropout_p", 0)
    ),
)
def test_sdpa_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


def _qkv(b=2, hq=4, hk=4, L=5, S=7, e=8, ev=6):
    torch.manual_seed(0)
    return (
        torch.randn(b, hq, L, e, dtype=F64),
        torch.randn(b, hk, S, e, dtype=F64),
        torch.randn(b, hk, S, ev, dtype=F64),
    )


@pytest.mark.parametrize(
    "kw", [dict(), dict(scale=0.3), dict(is_causal=True), dict(is_causal=True, scale=1.7)], ids=str
)
def test_sdpa_plain_and_causal(kw):
    q, k, v = _qkv()
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw), q, k, v)
    q, k, v = _qkv(L=6, S=6)
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw), q, k, v)


def test_sdpa_bool_mask_broadcast_and_fully_masked_rows():
    q, k, v = _qkv()
    mask = torch.rand(5, 7) > 0.4
    mask[:, 0] = True
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), q, k, v)
    per_head = torch.rand(2, 1, 5, 7) > 0.3
    per_head[..., 2, :] = False  # a query that sees nothing: output 0, gradient 0
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=per_head), q, k, v)


def test_sdpa_float_mask_gets_a_gradient_too():
    q, k, v = _qkv()
    bias = torch.randn(1, 4, 5, 7, dtype=F64)
    check_vjp(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, bias
    )
    check_vjp(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m[0, 0], scale=0.5),
        q,
        k,
        v,
        bias,
    )


@pytest.mark.parametrize("hk", [1, 2])
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_grouped_query_attention(hk, is_causal):
    q, k, v = _qkv(hq=4, hk=hk, L=6, S=6)
    check_vjp(
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, is_causal=is_causal, enable_gqa=True
        ),
        q,
        k,
        v,
    )


def test_sdpa_three_dim_inputs():
    q, k, v = (t[0] for t in _qkv())
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v)


def test_sdpa_keeps_the_fused_call_and_saves_no_attention_matrix():
    q, k, v = (t.float().requires_grad_() for t in _qkv(L=16, S=16, e=4, ev=4))
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    result = tv.autodiff(
        tv.trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), q, k, v)
    )
    assert (
        "torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask="
        in result.augmented_forward.python()
    )
    assert sorted(s.name for s in result.saved_for_backward if s.bytes > 16 * 16) == ["k", "q", "v"]


def test_sdpa_on_cpu_uses_the_flash_kernel_and_its_backward_like_eager():
    q, k, v = (t.float().requires_grad_() for t in _qkv(L=16, S=16, e=4, ev=4))
    result = tv.autodiff(
        tv.trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    )
    assert "aten._scaled_dot_product_flash_attention_for_cpu(" in result.augmented_forward.python()
    assert "flash_attention_for_cpu_backward" in result.backward.python()
    saved = {s.name: s for s in result.saved_for_backward}
    assert max(s.bytes for s in saved.values()) == q.numel() * 4  # nothing L x S
    check_vjp(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        *(t.detach().double() for t in (q, k, v)),
    )
