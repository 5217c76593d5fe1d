"""vjp / value_and_grad / grad, the traces autodiff returns, and saved-for-backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import thunderviz as tv
from tests.helpers import check_vjp
from thunderviz.autodiff.api import user_rules
from thunderviz.autodiff.remat import rematerialize
from thunderviz.core import BsymTag, TraceTag
from thunderviz.models import GPT, MLP, GPTConfig
from thunderviz.prims import aten


def f64(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def test_vjp_matches_autograd_on_a_small_program():
    def fn(x, w, b):
        h = torch.tanh(x @ w + b)
        return (h * h).sum(-1), h.exp()

    check_vjp(fn, f64(5, 3), f64(3, 4), f64(4))


def test_value_and_grad_and_grad_against_autograd():
    def loss(x, w):
        return F.relu(x @ w).pow(2).mean()

    x, w = f64(6, 3), f64(3, 2)
    value, (gx, gw) = tv.value_and_grad(loss)(x, w)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ref = loss(xr, wr)
    ref.backward()
    torch.testing.assert_close(value, ref.detach())
    torch.testing.assert_close(gx, xr.grad)
    torch.testing.assert_close(gw, wr.grad)
    gx2, gw2 = tv.grad(loss)(x, w)
    torch.testing.assert_close(gw2, wr.grad)


def test_value_and_grad_of_a_module_returns_input_and_parameter_grads():
    torch.manual_seed(0)
    m = MLP().double()
    x, y = f64(4, 8), torch.tensor([0, 1, 2, 3])
    _, grads = tv.value_and_grad(m)(x, y)
    m(x, y).backward()
    assert grads[1] is None  # the integer target
    for p, g in zip(m.parameters(), grads[2:], strict=True):
        torch.testing.assert_close(g, p.grad)


def test_no_grad_and_detach_produce_no_backward_code():
    def fn(x, w):
        with torch.no_grad():
            scale = (w * 2).sum()
        return (x * w.detach()).sum() * scale + (x * w).sum()

    x, w = f64(3).requires_grad_(), f64(3).requires_grad_()
    result = tv.autodiff(tv.trace(fn, x, w))
    no_grad_ops = [b for b in result.forward.bound_symbols if BsymTag.NO_GRAD in b.tags]
    assert no_grad_ops, "the no_grad region is tagged"
    sources = {b.fwd_bsym.sym.id for b in result.backward.bound_symbols if b.fwd_bsym is not None}
    assert "torch.Tensor.detach" not in sources
    assert all(
        BsymTag.NO_GRAD not in b.fwd_bsym.tags
        for b in result.backward.bound_symbols
        if b.fwd_bsym is not None
    )
    check_vjp(fn, x.detach(), w.detach())


def test_traces_are_tagged_runnable_and_linked():
    torch.manual_seed(0)
    g = GPT(GPTConfig(n_layer=1, d_model=32, n_head=2, vocab_size=40, block_size=8))
    idx = torch.randint(0, 40, (2, 8))
    result = tv.autodiff(tv.trace(g, idx, idx))
    assert TraceTag.AUGMENTED_FORWARD in result.augmented_forward.tags
    assert TraceTag.BACKWARD in result.backward.tags
    forward_tops = {id(b) for b in result.forward.bound_symbols}
    for b in result.backward.bound_symbols[2:]:  # after the two unpacks
        assert b.fwd_bsym is not None and id(b.fwd_bsym) in forward_tops
    attn = next(b for b in result.forward.bound_symbols if "scaled_dot" in b.sym.id)
    backward_of_attn = [b for b in result.backward.bound_symbols if b.fwd_bsym is attn]
    assert backward_of_attn and all(b.module_path == "blocks.0.attn" for b in backward_of_attn)
    text = str(result.backward)
    assert "def backward(saved_for_backward, cotangents):" in text
    compile(text, "<backward>", "exec")


def test_saved_for_backward_is_first_class():
    torch.manual_seed(0)
    m = MLP()
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 3])
    result = tv.autodiff(tv.trace(m, x, y))
    saved = result.saved_for_backward
    assert saved and result.saved_bytes == sum(s.bytes for s in saved)
    names = {p.name for p in result.augmented_forward.output[1]}
    assert {s.name for s in saved} == names
    for s in saved:
        assert s.bytes == s.proxy.numel * torch.empty((), dtype=s.dtype).element_size()
        assert s.consumers, f"{s.name} is saved but no backward op reads it"
        assert all(c in result.backward.bound_symbols for c in s.consumers)
        if s.producer is not None:
            assert s.producer in result.augmented_forward.bound_symbols
            assert s.fwd_bsym in result.forward.bound_symbols


def test_rematerialization_never_saves_more():
    torch.manual_seed(0)
    g = GPT(GPTConfig(n_layer=2, d_model=32, n_head=2, vocab_size=40, block_size=8))
    idx = torch.randint(0, 40, (2, 8))
    result = tv.autodiff(tv.trace(g, idx, idx))
    remat = rematerialize(result)
    assert remat.saved_bytes <= result.saved_bytes
    recomputed = [
        b for b in remat.backward.bound_symbols if BsymTag.RECOMPUTE_IN_BACKWARD in b.tags
    ]
    assert len(recomputed) == sum(1 for s in remat.saved_for_backward if s.recomputed)


def test_user_rules_win_over_builtins():
    calls = []

    @tv.register_grad("aten.sin.default")
    def sin_rule(a):
        from_rule = aten.sin.default(a)
        calls.append(a.name)
        tv.put_grad(a, aten.mul.Tensor(tv.get_grad(from_rule), aten.cos.default(a)))
        return from_rule

    try:
        check_vjp(lambda x: torch.sin(x).sum(), f64(4))
        assert calls
    finally:
        user_rules.rules.pop("aten.sin.default")
