"""`torch.autograd.grad` called inside a traced program (a WGAN-GP or R1 penalty, a
physics-informed loss reading du/dx and d2u/dx2, MAML's inner step, FGSM's adversarial
input) is thunderviz's own VJP of the recording, recorded as the program's ops: `jit`'s
outputs and every gradient of them match eager's in float64, call after call, on other
inputs than the traced ones. Without create_graph the inner gradient is a constant of the
outer one, as in eager (first-order MAML differs from MAML exactly there)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.custom_function_models import DoubleInPlace
from thunderviz.capture.errors import CaptureError

D = torch.float64


def _wgan_gp(critic, real, fake):
    eps = torch.rand(real.size(0), 1, 1, 1, dtype=D)
    mix = (eps * real + (1 - eps) * fake).requires_grad_(True)
    out = critic(mix)
    (g,) = torch.autograd.grad(out, mix, torch.ones_like(out), create_graph=True)
    gp = ((g.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
    return critic(fake).mean() - critic(real).mean() + 10 * gp


def _conv_critic():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.LeakyReLU(0.2),
        nn.Conv2d(8, 8, 3, stride=2, groups=2),
        nn.LeakyReLU(0.2),
        nn.ConvTranspose2d(8, 4, 2, stride=2, output_padding=1, groups=2),
        nn.Flatten(),
        nn.Linear(4 * 7 * 7, 1),
    )


class _Block(nn.Module):
    """Attention written out (eager has no double backward of the CPU flash kernel), a
    LayerNorm, a GELU MLP."""

    def __init__(self, d=8):
        super().__init__()
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        att = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).softmax(-1)
        x = x + self.proj(att @ v)
        return x + self.down(F.gelu(self.up(x)))


def _r1(block, x):
    x = x.detach().requires_grad_(True)
    y = block(x).pow(2).sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    return y + g.pow(2).sum()


def _maml(mlp, x, y, xq, yq, create_graph):
    params = dict(mlp.named_parameters())
    loss = F.mse_loss(torch.func.functional_call(mlp, params, (x,)), y)
    grads = torch.autograd.grad(loss, list(params.values()), create_graph=create_graph)
    fast = {k: v - 0.1 * g for (k, v), g in zip(params.items(), grads, strict=True)}
    return F.mse_loss(torch.func.functional_call(mlp, fast, (xq,)), yq)


def _pinn(net, xt):
    xt = xt.clone().requires_grad_(True)
    u = net(xt)
    (du,) = torch.autograd.grad(u, xt, torch.ones_like(u), create_graph=True)
    ux, ut = du[:, :1], du[:, 1:]
    uxx = torch.autograd.grad(ux, xt, torch.ones_like(ux), create_graph=True)[0][:, :1]
    return ((ut - 0.01 * uxx) ** 2).mean() + (u**2).mean()


def _wrt_intermediate(net, x):
    h = torch.tanh(net[0](x))
    out = net[1](h).sin().sum()
    (gh,) = torch.autograd.grad(out, h, create_graph=True)
    return out + gh.pow(2).sum()


def _unused(net, x, z):
    y = net(x).sum()
    gx, gz = torch.autograd.grad(y, [x, z], allow_unused=True, create_graph=True)
    assert gz is None
    gx2, gz2 = torch.autograd.grad(net(x).sum(), [x, z], materialize_grads=True)
    return y + gx.sum() + gz2.sum() + gx2.sum()


def _input_penalty(net, x):
    x = x.requires_grad_(True)
    o = net(x)
    (g,) = torch.autograd.grad(o.sum(), x, create_graph=True)
    return o.mean() + g.pow(2).mean()


def _fgsm(net, x, y):
    x = x.clone().requires_grad_(True)
    (gx,) = torch.autograd.grad(F.cross_entropy(net(x), y), x)
    return F.cross_entropy(net(x + 0.1 * gx.sign()), y)


def _hvp(net, x, v):
    _, hv = torch.autograd.functional.hvp(lambda z: net(z).sum(), x, v, create_graph=True)
    return hv.pow(2).sum()


def _jacobian(net, x):
    jac = torch.autograd.functional.jacobian(lambda z: net(z).squeeze(-1), x, create_graph=True)
    return jac.pow(2).sum()


def _checkpointed(net, x):
    x = x.requires_grad_()
    h = torch.utils.checkpoint.checkpoint(net, x, use_reentrant=False)
    (g,) = torch.autograd.grad(h.sum(), x, create_graph=True)
    return h.mean() + g.pow(2).sum()


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


def _through_a_function(net, x):
    """The user's backward, differentiated again (its saved input keeps its history)."""
    x = x.requires_grad_()
    o = _Square.apply(net(x)).sum()
    (g,) = torch.autograd.grad(o, x, create_graph=True)
    return o + g.pow(2).sum()


class _Exp(torch.autograd.Function):
    """Saves its output, as an exp or a sigmoid does."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


def _through_a_function_writing_in_place(net, x):
    """The output's history is the Function's node (its backward doubles), not the copy's."""
    o = (DoubleInPlace.apply(net(x)) ** 2).sum()
    (g,) = torch.autograd.grad(o, x, create_graph=True)
    return o + g.pow(2).sum()


def _through_a_function_saving_its_output(net, x):
    """Eager's saved output keeps the Function's node: the backward's `g * y` is
    differentiated again through `y` (it was taken as a constant: half the penalty's
    gradient, without a word)."""
    o = (_Exp.apply(net(x) * 0.3) ** 2).sum()
    (g,) = torch.autograd.grad(o, x, create_graph=True)
    return o + g.pow(2).sum()


def _recurrent(net, idx):
    e = net[0](idx)
    o, _ = net[1](e)
    (ge,) = torch.autograd.grad(o.pow(2).sum(), e, create_graph=True)
    return o.mean() + ge.pow(2).sum()


def _inputs(*shapes, requires_grad=False):
    return lambda: tuple(torch.randn(*s, dtype=D, requires_grad=requires_grad) for s in shapes)


def _labels(n, classes):
    return lambda: (torch.randn(n, 5, dtype=D), torch.randint(0, classes, (n,)))


def _mlp(*sizes, act=nn.Tanh, extra=()):
    layers = []
    for a, b in zip(sizes, sizes[1:], strict=False):
        layers += [nn.Linear(a, b), act()]
    return nn.Sequential(*layers[:-1], *extra)


CASES = {
    "wgan-gp, conv critic (strided, grouped, transposed)": (
        _conv_critic,
        _wgan_gp,
        _inputs((4, 3, 8, 8), (4, 3, 8, 8)),
    ),
    "R1 penalty, attention block": (_Block, _r1, _inputs((2, 5, 8))),
    "MAML, second order": (
        lambda: _mlp(4, 8, 3, act=nn.ReLU),
        lambda m, *a: _maml(m, *a, create_graph=True),
        _inputs((6, 4), (6, 3), (6, 4), (6, 3)),
    ),
    "MAML, first order (no create_graph)": (
        lambda: _mlp(4, 8, 3, act=nn.ReLU),
        lambda m, *a: _maml(m, *a, create_graph=False),
        _inputs((6, 4), (6, 3), (6, 4), (6, 3)),
    ),
    "PINN, second derivative": (lambda: _mlp(2, 16, 16, 1), _pinn, _inputs((10, 2))),
    "gradient as to an intermediate": (
        lambda: nn.ModuleList([nn.Linear(4, 6), nn.Linear(6, 2)]),
        _wrt_intermediate,
        _inputs((3, 4)),
    ),
    "allow_unused, materialize_grads": (
        lambda: nn.Linear(3, 3),
        _unused,
        lambda: (
            torch.randn(2, 3, dtype=D, requires_grad=True),
            torch.randn(2, dtype=D).requires_grad_(),
        ),
    ),
    "dropout under a penalty": (
        lambda: nn.Sequential(nn.Linear(4, 32), nn.GELU(), nn.Dropout(0.3), nn.Linear(32, 1)),
        _input_penalty,
        _inputs((8, 4)),
    ),
    "BatchNorm (train) under a penalty": (
        lambda: nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.SiLU(), nn.Linear(8, 1)),
        _input_penalty,
        _inputs((8, 4)),
    ),
    "LayerNorm after a Linear under a penalty": (
        lambda: nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 1)),
        _input_penalty,
        _inputs((5, 4)),
    ),
    "GroupNorm after a conv under a penalty": (
        lambda: nn.Sequential(
            nn.Conv2d(2, 4, 3), nn.GroupNorm(2, 4), nn.Tanh(), nn.Flatten(), nn.Linear(16, 1)
        ),
        _input_penalty,
        _inputs((3, 2, 4, 4)),
    ),
    "autograd.functional.hvp": (lambda: _mlp(3, 8, 1), _hvp, _inputs((4, 3), (4, 3))),
    "autograd.functional.jacobian": (lambda: _mlp(3, 8, 1), _jacobian, _inputs((4, 3))),
    "non-reentrant checkpoint": (lambda: _mlp(3, 8, 1), _checkpointed, _inputs((4, 3))),
    "a custom autograd.Function": (lambda: nn.Linear(3, 3), _through_a_function, _inputs((4, 3))),
    "a custom autograd.Function writing its input in place": (
        lambda: nn.Linear(3, 3),
        _through_a_function_writing_in_place,
        _inputs((4, 3), requires_grad=True),
    ),
    "a custom autograd.Function saving its output": (
        lambda: nn.Linear(3, 3),
        _through_a_function_saving_its_output,
        _inputs((4, 3), requires_grad=True),
    ),
    "LSTM, as to the embeddings": (
        lambda: nn.ModuleList([nn.Embedding(10, 4), nn.LSTM(4, 5, batch_first=True)]),
        _recurrent,
        lambda: (torch.randint(0, 10, (2, 5)),),
    ),
    "FGSM adversarial input (no create_graph)": (
        lambda: nn.Sequential(nn.Linear(5, 7), nn.LayerNorm(7), nn.ReLU(), nn.Linear(7, 4)),
        _fgsm,
        _labels(6, 4),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_jit_matches_eager_call_after_call(case):
    make, program, inputs = CASES[case]
    torch.manual_seed(0)
    eager_model = make().to(D)
    model = copy.deepcopy(eager_model)
    jitted = tv.jit(lambda *a: program(model, *a))
    for call in range(3):
        torch.manual_seed(10 + call)
        args = inputs()
        eager_args = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
        # the leaves before the call (`_input_penalty` makes its input one, see below)
        leaves = [a for a in args if a.requires_grad]
        eager_leaves = [a for a in eager_args if a.requires_grad]
        torch.manual_seed(100 + call)
        want = program(eager_model, *eager_args)
        torch.manual_seed(100 + call)
        got = jitted(*args)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        got_grads = torch.autograd.grad(got, [*model.parameters(), *leaves], allow_unused=True)
        want_grads = torch.autograd.grad(
            want, [*eager_model.parameters(), *eager_leaves], allow_unused=True
        )
        for g, w in zip(got_grads, want_grads, strict=True):
            if w is None:
                assert g is None or not g.any()
            else:
                torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
        for b, eb in zip(model.buffers(), eager_model.buffers(), strict=True):
            torch.testing.assert_close(b, eb, rtol=0, atol=0)  # running statistics, once


def test_the_trace_shows_one_autograd_grad_call_whose_ops_are_the_code():
    net = _mlp(2, 4, 1).to(D)
    trace = tv.trace(lambda x: _pinn(net, x), torch.randn(3, 2, dtype=D))
    calls = [b for b in trace.bound_symbols if b.sym.name == "torch.autograd.grad"]
    assert len(calls) == 2  # du, then d2u
    assert all(b.executes_subsymbols and b.subsymbols for b in calls)
    assert "torch.autograd.grad(" in str(trace)


def test_a_fake_trace_takes_the_inner_gradient_too():
    critic = _conv_critic().to(D)
    real, fake = torch.randn(4, 3, 8, 8, dtype=D), torch.randn(4, 3, 8, 8, dtype=D)
    trace = tv.trace(lambda r, f: _wgan_gp(critic, r, f), real, fake, fake=True)
    assert trace.output.shape == ()


def _nonscalar(x):
    return torch.autograd.grad(x * 2, x)


def _unused_input(x, z):
    return torch.autograd.grad((x * 2).sum(), [x, z])


def _needs_no_grad(x, z):
    return torch.autograd.grad((x * z).sum(), z)


@pytest.mark.parametrize(
    "program, message",
    [
        (_nonscalar, "implicitly created only for scalar outputs"),
        (_unused_input, "appears to not have been used in the graph"),
        (_needs_no_grad, "does not require grad"),
    ],
)
def test_what_eager_refuses_is_refused_with_eagers_message(program, message):
    x = torch.randn(3, dtype=D, requires_grad=True)
    args = (x,) if program is _nonscalar else (x, torch.randn(3, dtype=D))
    if program is _unused_input:
        args = (x, torch.randn(3, dtype=D, requires_grad=True))
    with pytest.raises(RuntimeError, match=message):
        program(*args)
    with pytest.raises(CaptureError, match=message):
        tv.jit(program)(*args)


def test_a_backward_inside_the_program_is_refused_with_the_way_out():
    def step(x):
        (x * 2).sum().backward()
        return x.grad

    with pytest.raises(CaptureError, match=r"torch\.autograd\.grad\(loss, params\)"):
        tv.jit(step)(torch.randn(3, requires_grad=True))


def test_requires_grad_inside_the_program_makes_a_leaf():
    def program(x):
        x.requires_grad_()
        (g,) = torch.autograd.grad((x.sin()).sum(), x)
        return g

    x = torch.randn(4, dtype=D)
    jitted = tv.jit(program)
    for _ in range(2):
        torch.testing.assert_close(jitted(x), x.cos())


def test_an_input_the_program_makes_a_leaf_gets_eagers_flag_and_gradient():
    """A physics-informed loss often calls `x.requires_grad_()` on its own input: eager's
    input then requires grad and its `.grad` fills; so do jit's, call after call."""
    torch.manual_seed(0)
    net = _mlp(2, 8, 1).to(D)

    def loss(x):
        x.requires_grad_(True)
        u = net(x)
        (du,) = torch.autograd.grad(u.sum(), x, create_graph=True)
        return (du**2).mean() + u.mean()

    jitted = tv.jit(loss)
    for _ in range(3):
        x = torch.randn(5, 2, dtype=D)
        eager_x = x.clone()
        jitted(x).backward()
        loss(eager_x).backward()
        assert x.requires_grad and eager_x.requires_grad
        torch.testing.assert_close(x.grad, eager_x.grad, rtol=1e-10, atol=1e-12)


def _solve_loss(a, b):
    return torch.linalg.solve(a, b).sin().sum()


def _penalty_inside(a, b):
    ga, gb = torch.autograd.grad(_solve_loss(a, b), [a, b], create_graph=True)
    return (ga**2).sum() + (gb**2).sum()


def _second_order(program, a, b, inside):
    a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
    if inside:
        return torch.autograd.grad(program(a, b), [a, b])
    ga, gb = torch.autograd.grad(program(a, b), [a, b], create_graph=True)
    return torch.autograd.grad((ga**2).sum() + (gb**2).sum(), [a, b])


@pytest.mark.parametrize("inside", [True, False], ids=["inside the call", "outside it"])
def test_a_solves_gradient_differentiates_again_through_its_matrix(inside):
    """The backward of a solve read the LU factors, constants to autograd: the second
    derivative as to A came out wrong (off by 7 on this A), outside the call as well."""
    torch.manual_seed(0)
    a = torch.randn(4, 4, dtype=D) + 4 * torch.eye(4, dtype=D)
    b = torch.randn(4, 2, dtype=D)
    program = _penalty_inside if inside else _solve_loss
    want = _second_order(program, a, b, inside)
    got = _second_order(tv.jit(program), a, b, inside)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
