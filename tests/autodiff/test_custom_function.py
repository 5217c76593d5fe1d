"""User-defined torch.autograd.Functions: their own backward is used, as in eager.

Every check is against eager PyTorch (which runs the same user backward): gradients of
every parameter over three SGD steps through `jit`, `value_and_grad`/`vjp`, and the debug
stepper. A deliberately wrong backward must come out as that wrong gradient."""

from __future__ import annotations

import copy
import functools
import threading
import warnings

import pytest
import torch
import torch.nn as nn
from torch.autograd.function import Function, once_differentiable
from torch.utils.checkpoint import checkpoint

import thunderviz as tv
from tests.autodiff.idioms_training import TIGHT, train_like_eager
from thunderviz.autodiff.errors import AutodiffError
from thunderviz.capture.custom_function import APPLY_ID, BACKWARD_ID
from thunderviz.capture.errors import CaptureError


class ScaleGrad(Function):
    """Identity forward, gradient times `scale` (gradient reversal when negative)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None


class RoundSTE(Function):
    """Quantize to quarters; straight-through gradient."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g


class WrongGrad(Function):
    """A planted bug: the forward is x * 2, the backward says 7."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 7


NEEDS_LOG: list[tuple[bool, ...]] = []


class SplitScale(Function):
    """Several outputs (one integer, marked non-differentiable), non-tensor arguments, ctx
    attributes, save_for_backward, needs_input_grad, set_materialize_grads(False) (the
    integer output's gradient is None), once_differentiable, and a weight gradient returned
    in the broadcast shape (the engine sums it to the weight's)."""

    @staticmethod
    def forward(ctx, x, w, k, mode):
        ctx.k, ctx.mode = k, mode
        y = x * w
        idx = y.argmax(dim=-1)
        ctx.save_for_backward(x, w)
        ctx.mark_non_differentiable(idx)
        ctx.set_materialize_grads(False)
        return y[..., :k], y[..., k:], idx

    @staticmethod
    @once_differentiable
    def backward(ctx, g1, g2, g_idx):
        NEEDS_LOG.append(tuple(ctx.needs_input_grad))
        assert ctx.mode == "split" and g1.shape[-1] == ctx.k and g_idx is None
        x, w = ctx.saved_tensors
        g = torch.cat([g1, g2], dim=-1)
        gx = g * w if ctx.needs_input_grad[0] else None
        gw = g * x if ctx.needs_input_grad[1] else None  # shape of x: summed to w's by autograd
        return gx, gw, None, None


class Cube(Function):
    """New style: forward without ctx, setup_context, a default argument, a vmap rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale=0.5):
        return x ** 3 * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.save_for_backward(x)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g * ctx.scale, None


class FunctionMLP(nn.Module):
    def __init__(self, fns=("scale", "ste", "split", "cube")):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(6, 16), nn.Linear(16, 16), nn.Linear(16, 3)
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 16))
        self.fns = fns

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if "scale" in self.fns:
            h = ScaleGrad.apply(h, -0.3)
        if "ste" in self.fns:
            h = RoundSTE.apply(h)
        h = torch.relu(self.fc2(h))
        if "split" in self.fns:
            a, b, idx = SplitScale.apply(h, self.w, 10, "split")
            h = torch.cat([a * 2, b], dim=-1) + idx.unsqueeze(-1).to(h.dtype) * 0.01
        if "cube" in self.fns:
            h = Cube.apply(h)
        if "wrong" in self.fns:
            h = WrongGrad.apply(h)
        return self.fc3(h)


def _mse(out):
    return out.square().mean()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_functions_in_an_mlp_train_like_eager(dtype):
    torch.manual_seed(0)
    model = FunctionMLP().to(dtype)
    xs = [torch.randn(5, 6, dtype=dtype) for _ in range(3)]
    NEEDS_LOG.clear()
    train_like_eager(model, lambda step: ((xs[step],), {}), _mse, dtype=dtype)
    # eager and jit alternate each step: the user's backward saw the same needs_input_grad
    assert NEEDS_LOG == [(True, True, False, False)] * 6


def test_the_trace_shows_one_call_per_function_and_the_users_backward():
    torch.manual_seed(0)
    model, x = FunctionMLP(), torch.randn(5, 6)
    forward = tv.trace(model, x)
    calls = [b for b in forward.bound_symbols if b.sym.id == APPLY_ID]
    assert [b.args[0].value.cls for b in calls] == [ScaleGrad, RoundSTE, SplitScale, Cube]
    assert all(b.subsymbols for b in calls)  # the forward's ops, for viewing
    assert calls[0].source.code == "h = ScaleGrad.apply(h, -0.3)"
    text = str(forward)
    assert "= ScaleGrad.apply(" in text and "= SplitScale.apply(" in text
    result = tv.autodiff(forward)
    backward_text = str(result.backward)
    for name in ("ScaleGrad", "RoundSTE", "SplitScale", "Cube"):
        assert f"= {name}.backward(ctx" in backward_text
        assert f"= {name}.forward_with_ctx(" in str(result.augmented_forward)
    # printed traces run: the forward trace reproduces eager's output bit for bit
    params = [*model.parameters()]
    out = forward.python_callable()(x, *params)
    assert torch.equal(out, model(x))
    assert torch.autograd.Function.apply.__func__.__module__ == "torch.autograd.function"


def test_a_wrong_user_backward_gives_that_wrong_gradient():
    torch.manual_seed(0)
    model, x = FunctionMLP(fns=("wrong",)), torch.randn(5, 6)
    value, grads = tv.value_and_grad(lambda x: WrongGrad.apply(x).sum())(x)
    assert torch.equal(grads[0], torch.full_like(x, 7.0))  # the user's 7, not the forward's 2
    jitted = tv.jit(copy.deepcopy(model))
    jitted(x).sum().backward()
    model(x).sum().backward()
    for pj, pe in zip(jitted.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(pj.grad, pe.grad, **TIGHT[torch.float32])


class Loss(nn.Module):
    """A model and its loss as one module: a scalar output, parameters named net_*."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, *inputs):
        return _mse(self.net(*inputs))


def _eager_grads(model, *inputs):
    """Eager's gradient of each parameter of `Loss(model)` under its trace argument name."""
    eager = copy.deepcopy(model)
    loss = _mse(eager(*inputs))
    loss.backward()
    return loss.detach(), {"net_" + n.replace(".", "_"): p.grad for n, p in eager.named_parameters()}


def test_value_and_grad_and_vjp_match_eager_in_float64():
    torch.manual_seed(0)
    model = FunctionMLP().double()
    x = torch.randn(4, 6, dtype=torch.float64)
    loss, expected = _eager_grads(model, x)
    value, grads = tv.value_and_grad(Loss(model))(x)
    torch.testing.assert_close(value, loss, **TIGHT[torch.float64])
    names = [p.name for p in tv.trace(Loss(model), x).args]
    for name, g in zip(names[1:], grads[1:], strict=True):
        torch.testing.assert_close(g, expected[name], **TIGHT[torch.float64], msg=name)
    ct = torch.randn(4, 3, dtype=torch.float64)
    out, vjp_grads = tv.vjp(model)((x,), (ct,))
    xe = x.clone().requires_grad_(True)
    eager_out = model(xe)
    eager_out.backward(ct)
    torch.testing.assert_close(out, eager_out.detach(), **TIGHT[torch.float64])
    torch.testing.assert_close(vjp_grads[0], xe.grad, **TIGHT[torch.float64])


def test_the_debug_stepper_steps_through_the_users_backward():
    torch.manual_seed(0)
    model, x = FunctionMLP(), torch.randn(5, 6)
    session = tv.Session(Loss(model), x)
    stepper = session.new_stepper()
    records = []
    while not stepper.done:
        records.append(stepper.step())
    user_steps = [r for r in records if r.bsym.sym.id == BACKWARD_ID]
    assert [r.fwd_bsym.args[0].value.cls for r in user_steps] == [Cube, SplitScale, RoundSTE, ScaleGrad]
    _, expected = _eager_grads(model, x)
    for name, g in expected.items():
        torch.testing.assert_close(stepper.grads[name], g, **TIGHT[torch.float32], msg=name)
    assert all(c.allclose for c in session.compare_with_autograd())


class Block(nn.Module):
    """A pre-norm transformer block whose body runs under torch.utils.checkpoint."""

    def __init__(self, d=8, reentrant=True):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 16), nn.GELU(), nn.Linear(16, d))
        self.reentrant = reentrant

    def body(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))

    def forward(self, x):
        return checkpoint(self.body, x, use_reentrant=self.reentrant)


class CheckpointedNet(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.embed, self.block, self.head = nn.Linear(4, 8), Block(reentrant=reentrant), nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.block(self.embed(x)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpoint_in_a_transformer_block_trains_like_eager(reentrant, dtype):
    torch.manual_seed(0)
    model = CheckpointedNet(reentrant).to(dtype)
    xs = [torch.randn(2, 5, 4, dtype=dtype) for _ in range(3)]
    jitted = train_like_eager(model, lambda step: ((xs[step],), {}), _mse, dtype=dtype)
    forward = tv.last_traces(jitted)[0]
    ids = [b.sym.id for b in forward.bound_symbols]
    assert (APPLY_ID in ids) == reentrant  # non-reentrant checkpoint is recorded op by op


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpoint_through_value_and_grad_and_the_stepper(reentrant):
    """The reentrant backward accumulates the block's parameter gradients into `.grad`:
    they are collected as gradients of the trace, and `.grad` is left as it was."""
    torch.manual_seed(0)
    model, x = CheckpointedNet(reentrant), torch.randn(2, 5, 4)
    loss, expected = _eager_grads(model, x)
    value, grads = tv.value_and_grad(Loss(model))(x)
    torch.testing.assert_close(value, loss, **TIGHT[torch.float32])
    names = [p.name for p in tv.trace(Loss(model), x).args]
    for name, g in zip(names[1:], grads[1:], strict=True):
        torch.testing.assert_close(g, expected[name], **TIGHT[torch.float32], msg=name)
    stepper = tv.Session(Loss(model), x).new_stepper()
    stepper.finish()
    # step back over the checkpoint's backward and run it again: the same gradients
    user_step = next((i for i, b in enumerate(stepper.bsyms) if b.sym.id == BACKWARD_ID), None)
    assert (user_step is not None) == reentrant
    while user_step is not None and stepper.index > user_step:
        stepper.back()
    stepper.finish()
    for name, g in expected.items():
        torch.testing.assert_close(stepper.grads[name], g, **TIGHT[torch.float32], msg=name)
    assert all(p.grad is None for p in model.parameters())


class JvpOnly(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def jvp(ctx, t):
        return t * 3


class JvpOnlyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(3, 3), JvpOnlyLayer())

    def forward(self, x):
        return self.inner(x).sum()


class JvpOnlyLayer(nn.Module):
    def forward(self, x):
        return JvpOnly.apply(x)


def test_a_function_without_backward_is_refused_with_where_and_what_to_do():
    forward = tv.trace(JvpOnlyNet(), torch.randn(2, 3))
    with pytest.raises(AutodiffError) as err:
        tv.autodiff(forward)
    msg = str(err.value)
    assert "JvpOnly.apply" in msg and "test_custom_function.py" in msg
    assert "return JvpOnly.apply(x)" in msg and "in module 'inner.1'" in msg
    assert "backward staticmethod" in msg


class DoubleInPlace(Function):
    """Writes into its input and says so (ctx.mark_dirty), as in-place activations do."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


def _in_place_on_a_tensor(x, w):
    h = x * w
    y = DoubleInPlace.apply(h)
    return (y * h + x).sum()  # y is h, which now holds the new value (as in eager)


def _in_place_on_a_view(x, w):
    h = x * w
    DoubleInPlace.apply(h[:, :2])  # the write reaches h
    return (h * h).sum()


@pytest.mark.parametrize("fn", [_in_place_on_a_tensor, _in_place_on_a_view])
def test_an_in_place_function_marking_its_input_dirty_matches_eager(fn):
    torch.manual_seed(0)
    x, w = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    value, grads = tv.value_and_grad(fn)(x, w)
    xe, we = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    loss = fn(xe, we)
    loss.backward()
    torch.testing.assert_close(value, loss.detach(), **TIGHT[torch.float64])
    torch.testing.assert_close(grads[0], xe.grad, **TIGHT[torch.float64])
    torch.testing.assert_close(grads[1], we.grad, **TIGHT[torch.float64])
    forward_only = tv.trace(fn, x, w).python_callable()(x.clone(), w)  # runs the user's apply
    torch.testing.assert_close(forward_only, loss.detach(), **TIGHT[torch.float64])
    xj, wj = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    tv.jit(fn)(xj, wj).backward()
    torch.testing.assert_close(xj.grad, xe.grad, **TIGHT[torch.float64])
    torch.testing.assert_close(wj.grad, we.grad, **TIGHT[torch.float64])


class WritesABuffer(Function):
    @staticmethod
    def forward(ctx, x, counter):
        counter.add_(1)  # not an argument it marks dirty: eager's autograd would not know
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


def test_a_function_writing_into_a_tensor_it_does_not_mark_dirty_is_refused():
    counter = torch.zeros(())

    def fn(x):
        return WritesABuffer.apply(x * 1, counter).sum()

    with pytest.raises(CaptureError) as err:
        tv.trace(fn, torch.randn(3, requires_grad=True))
    assert "WritesABuffer.apply" in str(err.value) and "ctx.mark_dirty" in str(err.value)
    assert "WritesABuffer.apply(x * 1, counter)" in err.value.source.code
    assert counter.item() == 0  # tracing wrote into a copy, never into the user's tensor


def test_other_threads_run_function_apply_as_usual_while_a_trace_runs():
    started, done = threading.Event(), threading.Event()
    seen = {}

    class Waits(Function):
        @staticmethod
        def forward(ctx, x):
            started.set()
            assert done.wait(10)
            return x + 1

        @staticmethod
        def backward(ctx, g):
            return g

    def other():
        assert started.wait(10)
        y = ScaleGrad.apply(torch.ones(3, requires_grad=True), 2.0)
        seen["grad_fn"] = type(y.grad_fn).__name__
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    forward = tv.trace(lambda x: Waits.apply(x), torch.ones(3, requires_grad=True))
    thread.join()
    assert seen["grad_fn"] == "ScaleGradBackward"  # eager's apply, not our recording
    assert [b.sym.id for b in forward.bound_symbols] == [APPLY_ID]


class HeldByClosures(nn.Module):
    """checkpoint over functions that hold traced tensors: a lambda closing over the mask
    (an input) and over `skip` (made from parameters, so it needs a gradient), and a
    functools.partial binding them, as Hugging Face's checkpointing binds its kwargs."""

    def __init__(self, use_partial):
        super().__init__()
        self.pre, self.inp = nn.Linear(4, 4), nn.Linear(4, 4)
        self.block, self.post = nn.Linear(4, 4), nn.Linear(4, 1)
        self.use_partial = use_partial

    def body(self, h, mask, skip):
        return torch.tanh(self.block(h)) * mask + skip

    def forward(self, x, mask):
        skip = self.pre(x)
        if self.use_partial:
            fn = functools.partial(self.body, mask=mask, skip=skip)
        else:
            fn = lambda h: self.body(h, mask, skip)  # noqa: E731
        return self.post(checkpoint(fn, self.inp(x), use_reentrant=True))


@pytest.mark.parametrize("use_partial", [False, True], ids=["lambda", "partial"])
def test_tensors_held_by_the_checkpointed_function_take_each_calls_values(use_partial):
    torch.manual_seed(0)
    model = HeldByClosures(use_partial)
    data = [(torch.randn(3, 4), (torch.rand(3, 4) > 0.5).float()) for _ in range(3)]
    jitted = train_like_eager(model, lambda step: (data[step], {}), _mse)  # a new mask each step
    call = next(b for b in tv.last_traces(jitted)[0].bound_symbols if b.sym.id == APPLY_ID)
    held = call.kwargs["held"]
    assert len(held) == 2 and "mask" in [p.name for p in held]
    assert [p.requires_grad for p in held if p.name != "mask"] == [True]  # skip
    x, mask = data[0]
    loss, expected = _eager_grads(model, x, mask)
    value, grads = tv.value_and_grad(Loss(model))(x, mask)
    torch.testing.assert_close(value, loss, **TIGHT[torch.float32])
    names = [p.name for p in tv.trace(Loss(model), x, mask).args]
    for name, g in zip(names[2:], grads[2:], strict=True):
        torch.testing.assert_close(g, expected[name], **TIGHT[torch.float32], msg=name)


class KeepsOnItself(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Linear(4, 4)

    def body(self, h):
        return self.block(h) * self.mask

    def forward(self, x):
        self.mask = (x > 0).float()  # reaches the checkpointed body through the module
        return checkpoint(self.body, x, use_reentrant=True).sum()


def test_a_traced_tensor_reaching_the_forward_through_an_attribute_is_refused():
    with pytest.raises(CaptureError) as err:
        tv.trace(KeepsOnItself(), torch.randn(2, 4, requires_grad=True))
    assert "Pass the tensor as an argument" in str(err.value)
    assert "checkpoint(self.body, x, use_reentrant=True)" in err.value.source.code


def test_hugging_face_gradient_checkpointing_trains_like_eager():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=32, n_positions=8,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    ids = [torch.randint(0, 32, (2, 8)) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notices about the config and the API
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        jitted = train_like_eager(
            model, lambda step: ((ids[step],), {"labels": ids[step], "use_cache": False}),
            lambda out: out.loss)
    calls = [b for b in tv.last_traces(jitted)[0].bound_symbols if b.sym.id == APPLY_ID]
    assert len(calls) == 2 and all(b.kwargs.get("held") for b in calls)  # one per layer


def test_fake_tracing_saved_tensor_hooks_and_the_view_document():
    torch.manual_seed(0)
    model, x = FunctionMLP(), torch.randn(5, 6)
    fake = tv.trace(Loss(model), x, fake=True)
    assert [b.sym.id for b in fake.bound_symbols].count(APPLY_ID) == 4
    document = tv.Session(Loss(model), x).document()
    assert document["traces"]
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t

    eager, jitted = copy.deepcopy(model), tv.jit(model)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _mse(jitted(x)).backward()
        _mse(eager(x)).backward()
    assert packed
    for pj, pe in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(pj.grad, pe.grad, **TIGHT[torch.float32])


class BlockGrad(Function):
    """Stops the gradient by returning None for an input that needs one."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return None


def test_a_none_gradient_for_an_input_that_needs_one_is_zeros_with_a_warning():
    torch.manual_seed(0)
    fc1, fc2 = nn.Linear(3, 3), nn.Linear(3, 1)

    def fn(x):
        return fc2(BlockGrad.apply(fc1(x))).sum()

    x = torch.randn(4, 3, requires_grad=True)
    with pytest.warns(UserWarning, match="BlockGrad.backward returned None as the gradient of input 0"):
        _, grads = tv.value_and_grad(fn)(x)
    assert torch.equal(grads[0], torch.zeros_like(x))  # eager: x.grad stays None
    fn(x).backward()
    assert x.grad is None
