"""Whole models through thunderviz.jit: loss and every parameter gradient against eager
torch.autograd, three optimizer steps, and the module left as eager would leave it."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from benchmarks.programs import PROGRAMS
from tests.helpers import DEVICES
from thunderviz.models import CNN, GPT, MLP, GPTConfig

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-10, atol=1e-12)}


def _hf(name: str) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    if name == "gpt2":
        return transformers.GPT2LMHeadModel(
            transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2)
        )
    if name == "llama":
        return transformers.LlamaForCausalLM(
            transformers.LlamaConfig(
                vocab_size=100,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=32,
            )
        )
    return transformers.BertForMaskedLM(
        transformers.BertConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
        )
    )


def make(name: str, device: str, dtype: torch.dtype):
    """(model, args, kwargs, loss_of_output)"""
    torch.manual_seed(0)
    if name == "mlp":
        m = MLP()
        args = (torch.randn(16, 8), torch.randint(0, 4, (16,)))
    elif name in ("cnn_train", "cnn_eval"):
        m = CNN().train(name == "cnn_train")
        args = (torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))
    elif name == "gpt":
        m = GPT(GPTConfig(n_layer=2, d_model=32, n_head=4, vocab_size=64, block_size=16))
        idx = torch.randint(0, 64, (2, 16))
        args = (idx, idx)
    else:
        m = _hf(name).eval()
        ids = torch.randint(0, 100, (2, 8))
        m = m.to(device=device, dtype=dtype)
        return (
            m,
            (),
            {"input_ids": ids.to(device), "labels": ids.to(device), "use_cache": False},
            (lambda out: out.loss),
        )
    m = m.to(device=device, dtype=dtype)
    args = tuple(
        a.to(device=device, dtype=dtype) if a.is_floating_point() else a.to(device) for a in args
    )
    return m, args, {}, (lambda out: out)


MODELS = ["mlp", "cnn_train", "cnn_eval", "gpt", "gpt2", "llama", "bert"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", MODELS)
def test_loss_and_gradients_match_eager_for_three_optimizer_steps(name, dtype, device):
    model, args, kwargs, loss_of = make(name, device, dtype)
    eager = copy.deepcopy(model)
    jitted = tv.jit(model)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_j = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    tol = TOL[dtype]
    for _ in range(3):
        opt_e.zero_grad()
        opt_j.zero_grad()
        loss_e = loss_of(eager(*args, **kwargs))
        loss_j = loss_of(jitted(*args, **kwargs))
        loss_e.backward()
        loss_j.backward()
        torch.testing.assert_close(loss_j, loss_e, **tol)
        for (n, pe), pj in zip(eager.named_parameters(), model.parameters(), strict=True):
            assert (pe.grad is None) == (pj.grad is None), n
            if pe.grad is not None:
                torch.testing.assert_close(pj.grad, pe.grad, **tol, msg=lambda m, n=n: f"{n}: {m}")
        opt_e.step()
        opt_j.step()
    for (n, pe), pj in zip(eager.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(pj, pe, **tol, msg=lambda m, n=n: f"{n}: {m}")
    for (n, be), bj in zip(eager.named_buffers(), model.buffers(), strict=True):  # BN statistics
        torch.testing.assert_close(bj, be, **tol, msg=lambda m, n=n: f"buffer {n}: {m}")
    assert jitted.cache_misses == 1  # same signature every step: traced once


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("make", [m for _, m in PROGRAMS], ids=[m.__name__ for _, m in PROGRAMS])
def test_the_benchmarked_programs_train_like_eager(make, device):
    """What the speed benchmarks time is also right: three SGD steps of each program (HF
    GPT-2, the written-out GPT, the ResNet with BatchNorm, ...) against eager, on every
    device. In float32, where the kernels' reductions (atomics on a GPU) may sum in another
    order from one call to the next: close, not equal. cuDNN's TF32 convolutions are off:
    their 10-bit products would make the comparison one of rounding."""
    cudnn = torch.backends.cudnn
    # (torch.testing, imported by other tests, forbids setting the flags but through this)
    with cudnn.flags(
        enabled=cudnn.enabled,
        benchmark=cudnn.benchmark,
        deterministic=cudnn.deterministic,
        allow_tf32=False,
    ):
        _train_like_eager(*make(device))


def _train_like_eager(model, args, loss_of) -> None:
    eager = copy.deepcopy(model)
    jitted = tv.jit(model)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_j = torch.optim.SGD(model.parameters(), lr=0.05)
    tol = dict(rtol=1e-4, atol=1e-5)
    for step in range(3):
        for fn, opt in ((eager, opt_e), (jitted, opt_j)):
            opt.zero_grad()
            torch.manual_seed(step)  # GPT-2's dropout draws the same masks on both sides
            loss_of(fn(*args)).backward()
            opt.step()
        for (n, pe), pj in zip(eager.named_parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(pj, pe, **tol, msg=lambda m, n=n, s=step: f"{s} {n}: {m}")
    for (n, be), bj in zip(eager.named_buffers(), model.buffers(), strict=True):
        torch.testing.assert_close(bj, be, **tol, msg=lambda m, n=n: f"buffer {n}: {m}")
    assert jitted.cache_misses == 1


def test_grads_accumulate_across_calls_like_eager():
    model, args, _, _ = make("mlp", "cpu", torch.float64)
    eager = copy.deepcopy(model)
    jitted = tv.jit(model)
    for _ in range(2):
        eager(*args).backward()
        jitted(*args).backward()
    for pe, pj in zip(eager.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(pj.grad, pe.grad, rtol=1e-12, atol=1e-12)


def test_frozen_parameters_and_integer_inputs_get_no_gradient():
    model, args, _, _ = make("gpt", "cpu", torch.float32)
    model.wpe.weight.requires_grad_(False)
    jitted = tv.jit(model)
    jitted(*args).backward()
    assert model.wpe.weight.grad is None
    assert model.wte.weight.grad is not None
    (idx, targets) = args
    assert idx.grad is None and not idx.requires_grad
    backward = tv.last_backward_traces(jitted)[-1]
    grads = backward.output
    assert grads[0] is None and grads[1] is None  # the integer inputs


def test_retraces_on_new_shapes_but_not_on_new_values():
    model, (x, y), _, _ = make("mlp", "cpu", torch.float32)
    jitted = tv.jit(model)
    jitted(x, y)
    jitted(torch.randn_like(x), y)
    assert jitted.cache_misses == 1
    jitted(torch.randn(3, 8), torch.randint(0, 4, (3,)))
    assert jitted.cache_misses == 2
    model.fc1.weight.requires_grad_(False)
    jitted(x, y)
    assert jitted.cache_misses == 3
    with torch.no_grad():
        out = jitted(x, y)
    assert not out.requires_grad and jitted.cache_misses == 4


def test_last_traces_have_provenance():
    model, args, _, _ = make("mlp", "cpu", torch.float32)
    jitted = tv.jit(model)
    jitted(*args).backward()
    forward, augmented = tv.last_traces(jitted)
    (backward,) = tv.last_backward_traces(jitted)
    assert "Constructed by thunderviz.trace" in str(forward)
    assert "Constructed by VJP" in str(augmented) and "forward-backward split" in str(backward)
    assert str(backward).splitlines()[-1].strip().startswith("return")


def test_dropout_in_training_matches_eager_with_the_same_seed():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1)).double()
    eager = copy.deepcopy(model)
    x = torch.randn(16, 8, dtype=torch.float64)
    jitted = tv.jit(model)
    jitted(x).sum()  # trace once (draws random numbers) before seeding
    torch.manual_seed(123)
    eager(x).sum().backward()
    torch.manual_seed(123)
    jitted(x).sum().backward()
    for pe, pj in zip(eager.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(pj.grad, pe.grad, rtol=1e-12, atol=1e-12)


def test_rematerialization_keeps_results_identical():
    model, args, _, _ = make("gpt", "cpu", torch.float64)
    plain, remat = copy.deepcopy(model), copy.deepcopy(model)
    tv.jit(plain)(*args).backward()
    tv.jit(remat, rematerialize=True)(*args).backward()
    for a, b in zip(plain.parameters(), remat.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_grad_helpers_move_gradients():
    model, args, _, _ = make("mlp", "cpu", torch.float32)
    model(*args).backward()
    grads = tv.extract_grads(model)
    tv.clear_grads(model)
    assert all(p.grad is None for p in model.parameters())
    tv.populate_grads(grads, model)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))
    with pytest.raises(ValueError, match="gradients for"):
        tv.populate_grads(grads[:-1], model)


class _Wrap(nn.Module):
    def __init__(self, inner: nn.Module, call) -> None:
        super().__init__()
        self.inner, self.call = inner, call

    def forward(self, x):
        return self.call(self.inner, x)


@pytest.mark.parametrize("name", ["multihead_attention", "transformer_encoder_layer"])
def test_torch_attention_modules_match_eager(name):
    torch.manual_seed(0)
    if name == "multihead_attention":
        model = _Wrap(
            nn.MultiheadAttention(16, 4, batch_first=True), lambda m, x: m(x, x, x)[0].sum()
        )
    else:  # reaches aten._scaled_dot_product_attention_math and aten.contiguous
        model = _Wrap(
            nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0),
            lambda m, x: m(x).sum(),
        )
    model = model.double()
    eager = copy.deepcopy(model)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    loss = tv.jit(model)(x)
    loss.backward()
    ref = eager(x)
    ref.backward()
    torch.testing.assert_close(loss, ref, **TOL[torch.float64])
    for (n, pe), pj in zip(eager.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(
            pj.grad, pe.grad, **TOL[torch.float64], msg=lambda m, n=n: f"{n}: {m}"
        )


@torch.library.custom_op("thunderviz_test::unruled", mutates_args=())
def _unruled(x: torch.Tensor) -> torch.Tensor:
    """An op thunderviz cannot know: no grad rule, no decomposition."""
    return x * 2


_unruled.register_fake(lambda x: torch.empty_like(x))


class _Unruled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return _unruled(self.lin(x))


def test_a_module_without_rules_gets_an_error_naming_op_line_and_module():
    model = _Wrap(_Unruled(), lambda m, x: m(x).sum())
    with pytest.raises(tv.AutodiffError) as info:
        tv.jit(model)(torch.randn(2, 5, 4))
    msg = str(info.value)
    assert "unruled" in msg and "test_models.py" in msg and "module 'inner'" in msg
    assert "register_grad" in msg
