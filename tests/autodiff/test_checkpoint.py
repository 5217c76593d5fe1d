"""torch.utils.checkpoint in a model, reentrant (an autograd.Function whose backward re-runs
the block and calls torch.autograd.backward) and not (saved-tensor hooks): training through
`jit`, `value_and_grad` and the debug stepper equal to eager, Hugging Face's gradient
checkpointing included."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import thunderviz as tv
from tests.autodiff.custom_function_models import CheckpointedNet, Loss, mse
from tests.autodiff.idioms_training import TIGHT, train_like_eager
from tests.helpers import DEVICES, check_value_and_grad
from thunderviz.capture.custom_function import APPLY_ID, BACKWARD_ID
from thunderviz.capture.errors import CaptureError


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpoint_in_a_transformer_block_trains_like_eager(reentrant, dtype):
    torch.manual_seed(0)
    model = CheckpointedNet(reentrant).to(dtype)
    xs = [torch.randn(2, 5, 4, dtype=dtype) for _ in range(3)]
    jitted = train_like_eager(model, lambda step: ((xs[step],), {}), mse, dtype=dtype)
    forward = str(tv.last_traces(jitted)[0])
    # non-reentrant checkpoint is recorded op by op (torch 2.11 adds a Function of its own
    # that saves the inputs, _NoopSaveInputs)
    assert ("CheckpointFunction.apply(" in forward) == reentrant


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpoint_through_value_and_grad_and_the_stepper(reentrant):
    """The reentrant backward accumulates the block's parameter gradients into `.grad`:
    they are collected as gradients of the trace, and `.grad` is left as it was."""
    torch.manual_seed(0)
    model, x = CheckpointedNet(reentrant), torch.randn(2, 5, 4)
    expected = check_value_and_grad(Loss(model), x, **TIGHT[torch.float32])
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
    jitted = train_like_eager(model, lambda step: (data[step], {}), mse)  # a new mask each step
    call = next(b for b in tv.last_traces(jitted)[0].bound_symbols if b.sym.id == APPLY_ID)
    held = call.kwargs["held"]
    assert len(held) == 2 and "mask" in [p.name for p in held]
    assert [p.requires_grad for p in held if p.name != "mask"] == [True]  # skip
    x, mask = data[0]
    check_value_and_grad(Loss(model), x, mask, **TIGHT[torch.float32])


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
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=16,
        n_head=2,
        vocab_size=32,
        n_positions=8,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = transformers.GPT2LMHeadModel(config)
    ids = [torch.randint(0, 32, (2, 8)) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notices about the config and the API
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        jitted = train_like_eager(
            model,
            lambda step: ((ids[step],), {"labels": ids[step], "use_cache": False}),
            lambda out: out.loss,
        )
    calls = [b for b in tv.last_traces(jitted)[0].bound_symbols if b.sym.id == APPLY_ID]
    assert len(calls) == 2 and all(b.kwargs.get("held") for b in calls)  # one per layer


class DropoutInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.out = nn.Linear(4, 8), nn.Linear(8, 1)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3), nn.GELU())

    def forward(self, x):
        return self.out(checkpoint(self.body, self.inp(x), use_reentrant=True))


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_inside_a_reentrant_checkpoint_draws_and_redraws_eagers_mask(device):
    """The forward draws the mask where eager does; the backward's re-run restores the RNG
    state the forward saved on its ctx (on a GPU, the CUDA generator's too), so the gradient
    uses that same mask."""
    torch.manual_seed(0)
    xs = [torch.randn(5, 4, device=device) for _ in range(3)]
    train_like_eager(DropoutInside().to(device), lambda step: ((xs[step],), {}), mse)
