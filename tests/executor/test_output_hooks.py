"""A hook the user registers after the call on an output the program also reads inside (the
hidden states a model returns, an activation it keeps on `self`), and `retain_grad()` on it:
eager's see the output's whole gradient, from inside the program and outside it. A jitted
call is one autograd node, which autograd hands only the outside part, so the hook saw that
(or None), a hook that changes the gradient changed only that part, and the parameters'
gradients came out wrong without a word; `.grad` kept that part. Now the backward runs such
hooks at the point where the output's gradient is whole (executor/output_hooks.py).
Compared with eager, float64, on every call of several."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import transformers

import thunderviz as tv


def _pair(make):
    torch.manual_seed(0)
    eager = make()
    return eager, copy.deepcopy(eager)


def _grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-12, msg=name)


def _eager_and_jit(make, step, steps):
    """Per step, the pair (eager's, jit's) of what `step(module, call)` gives, each step
    seeded by its number and run after `zero_grad()`."""
    eager, ours = _pair(make)
    runs = []
    for module, call in ((eager, eager), (ours, tv.jit(ours))):
        runs.append([])
        for i in range(steps):
            torch.manual_seed(i)
            module.zero_grad()
            runs[-1].append(step(module, call))
    return list(zip(*runs, strict=True))


class ReturnsHidden(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4, dtype=torch.float64)
        self.head = nn.Linear(4, 2, dtype=torch.float64)

    def forward(self, x):
        h = torch.tanh(self.inner(x))
        self.kept = h  # an activation kept on the module, as feature extractors do
        return self.head(h).square().sum(), h


def _compare(make, register):
    """Per step: what the hooks `register(module, h)` puts on the hidden output saw, its
    `.grad`, and the parameters' gradients, eager's against jit's."""

    def step(module, call):
        loss, h = call(torch.randn(3, 4, dtype=torch.float64))
        seen = register(module, h)
        (loss + 0.5 * h.square().sum()).backward()
        kept = h.grad.clone() if h.retains_grad and h.grad is not None else None
        return seen, kept, _grads(module)

    for (seen_e, kept_e, grads_e), (seen_o, kept_o, grads_o) in _eager_and_jit(make, step, 3):
        assert len(seen_e) == len(seen_o)
        for a, b in zip(seen_e, seen_o, strict=True):
            torch.testing.assert_close(b, a, rtol=0, atol=1e-12)
        assert (kept_e is None) == (kept_o is None)
        if kept_e is not None:
            torch.testing.assert_close(kept_o, kept_e, rtol=0, atol=1e-12)
        _assert_same(grads_e, grads_o)


def test_a_hook_that_changes_the_gradient_changes_all_of_it():
    def register(module, h):
        seen = []
        h.register_hook(lambda g: seen.append(g.clone()))
        h.register_hook(lambda g: g.clamp(-0.05, 0.05))
        return seen

    _compare(ReturnsHidden, register)


def test_retain_grad_keeps_the_whole_gradient_after_the_hooks():
    def register(module, h):
        h.retain_grad()
        h.register_hook(lambda g: g * 3)
        return []

    _compare(ReturnsHidden, register)


def test_a_hook_on_an_activation_kept_on_the_module():
    def register(module, h):
        seen = []
        module.kept.register_hook(lambda g: seen.append(g.clone()))
        module.kept.retain_grad()
        return seen

    _compare(ReturnsHidden, register)


def test_a_hook_on_an_output_the_user_does_not_keep_still_runs():
    eager, ours = _pair(ReturnsHidden)
    for module, call in ((eager, eager), (ours, tv.jit(ours))):
        seen = []
        for step in range(2):
            torch.manual_seed(step)
            loss, _ = call(torch.randn(3, 4, dtype=torch.float64))
            call_outputs = call(torch.randn(3, 4, dtype=torch.float64))
            call_outputs[1].register_hook(lambda g, seen=seen: seen.append(g.sum().item()))
            (loss + call_outputs[0]).backward()
        module.seen = seen
    assert ours.seen == pytest.approx(eager.seen, rel=1e-12, abs=0)


def test_retain_grad_over_two_backwards_of_one_graph():
    eager, ours = _pair(ReturnsHidden)
    kept = []
    for call in (eager, tv.jit(ours)):
        torch.manual_seed(0)
        loss, h = call(torch.randn(3, 4, dtype=torch.float64))
        h.retain_grad()
        total = loss + h.sum()
        total.backward(retain_graph=True)
        total.backward()
        kept.append(h.grad)
    torch.testing.assert_close(kept[1], kept[0], rtol=1e-12, atol=1e-12)


def test_a_hook_returning_another_shape_is_refused_as_in_eager():
    _, ours = _pair(ReturnsHidden)
    loss, h = tv.jit(ours)(torch.randn(3, 4, dtype=torch.float64))
    h.register_hook(lambda g: g[0])
    with pytest.raises(RuntimeError, match="hook"):
        loss.backward()


class Stack(nn.Module):
    """Identical blocks, each one's output returned: blocks the reverse sweep would write
    out from one another (autodiff/block_sweep.py), each with its own hook point."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4, dtype=torch.float64) for _ in range(4))

    def forward(self, x):
        states = []
        for block in self.blocks:
            x = torch.tanh(block(x)) + x
            states.append(x)
        return x.square().sum(), states


def test_each_of_many_identical_blocks_runs_its_own_outputs_hooks():
    def step(module, call):
        loss, states = call(torch.randn(2, 4, dtype=torch.float64))
        for i, s in enumerate(states):
            s.register_hook(lambda g, i=i: g * (i + 2))
        states[1].retain_grad()
        loss.backward()
        return states[1].grad.clone(), _grads(module)

    for (kept_e, grads_e), (kept_o, grads_o) in _eager_and_jit(Stack, step, 3):
        torch.testing.assert_close(kept_o, kept_e, rtol=0, atol=1e-12)
        _assert_same(grads_e, grads_o)


def test_hugging_face_hidden_states_gradients():
    """Attribution's idiom: the gradient of the loss in a layer's hidden states."""
    transformers.logging.set_verbosity_error()

    def make():
        config = transformers.GPT2Config(
            vocab_size=50, n_positions=16, n_embd=16, n_layer=3, n_head=2, attn_pdrop=0.0,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_implementation="eager",
        )  # fmt: skip
        return transformers.GPT2LMHeadModel(config).double()

    def step(module, call):
        ids = torch.randint(0, 50, (2, 8))
        out = call(ids, labels=ids, output_hidden_states=True, use_cache=False)
        out.hidden_states[1].retain_grad()
        out.hidden_states[2].register_hook(lambda g: g * 0.5)
        out.loss.backward()
        return out.hidden_states[1].grad.clone(), _grads(module)

    for (kept_e, grads_e), (kept_o, grads_o) in _eager_and_jit(make, step, 2):
        torch.testing.assert_close(kept_o, kept_e, rtol=1e-10, atol=1e-12)
        _assert_same(grads_e, grads_o)


def test_a_gradient_penalty_through_a_hooked_output():
    """`create_graph=True` recomputes the call (executor/double_backward.py): the second
    backward reaches the output's hooks and `.grad` there too, as eager's does."""

    def step(module, call):
        x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
        loss, h = call(x)
        seen = []
        h.register_hook(lambda g: (seen.append(g.sum().item()), g * 2)[1])
        h.retain_grad()
        (gx,) = torch.autograd.grad(loss + h.sum(), x, create_graph=True)
        gx.square().sum().backward()
        return seen, h.grad.clone(), _grads(module)

    for (seen_e, kept_e, grads_e), (seen_o, kept_o, grads_o) in _eager_and_jit(
        ReturnsHidden, step, 2
    ):
        assert seen_o == pytest.approx(seen_e, rel=1e-12, abs=1e-12) and len(seen_e) == 2
        torch.testing.assert_close(kept_o, kept_e, rtol=1e-12, atol=1e-12)
        _assert_same(grads_e, grads_o)


class RetainsInside(ReturnsHidden):
    """`retain_grad()` called by the program itself, on values it keeps and returns."""

    def forward(self, x):
        h = torch.tanh(self.inner(x))
        h.retain_grad()
        self.kept = h
        z = self.head(h)
        z.retain_grad()
        return z.square().sum() + h.sum(), z


def test_retain_grad_the_program_calls_on_what_it_keeps_and_returns():
    def step(module, call):
        loss, z = call(torch.randn(3, 4, dtype=torch.float64))
        (loss + z.pow(3).sum()).backward()
        return module.kept.grad.clone(), z.grad.clone(), _grads(module)

    for (h_e, z_e, grads_e), (h_o, z_o, grads_o) in _eager_and_jit(RetainsInside, step, 3):
        torch.testing.assert_close(h_o, h_e, rtol=0, atol=1e-12)
        torch.testing.assert_close(z_o, z_e, rtol=0, atol=1e-12)
        _assert_same(grads_e, grads_o)
