"""A freshly traced call's first run takes its values from the trace (executor/first_run.py).

Each program runs jitted and eagerly from the same generator state, on copies of one module
and of the inputs; the first call must agree with eager in everything a user can see: the
outputs, the gradients, the buffers and inputs the program wrote into, and the next random
draw. Where a value's aliasing is visible (an output that is an input, or a view of one) the
first call must also agree with the second, which runs the compiled trace. Each program says
whether its first run can be taken from the trace, so a path that quietly stops being taken
(or is taken where it must not be) fails here too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import thunderviz as tv
from thunderviz.executor.bridge import not_compiled


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu(self.bn(self.conv(x)))
        return self.fc(h.mean((2, 3)))


class WritesItsInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        counts.add_(1)
        counts[0].mul_(2)  # through a view of the input
        return (x * self.w * counts).sum()


class ReturnsItsInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, (x @ self.w).tanh().sum()


class ReturnsAView(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.view(-1), (x.view(-1) * self.w).sum()


class Draws(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn_like(x)
        return ((x + noise) * self.w).sum() + torch.rand(()).mul(self.w.sum())


class Dropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.fc(x), 0.5, training=True).sum()


class ReadsValues(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.abs().max().item()
        y = x * self.w * scale
        return y.sum() if y.sum() > 0 else (-y).exp().sum()


class ReplacesBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps = self.steps + 1
        self.ema = 0.9 * self.ema + 0.1 * x.detach().mean(0)
        return (x * self.w - self.ema).pow(2).sum()


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad


class CustomFunction(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Cube.apply(x * self.w).sum()


class StaleView(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w
        first = y[:1]  # taken before the write below, read after it
        y.add_(1.0)
        return (first * 3).sum() + y.sum()


class GRUSteps(nn.Module):
    """ATen's GRU cell updates the pieces of `unsafe_chunk` in place: they share the gates'
    storage but not their version counter."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.GRUCell(3, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = None
        for t in range(x.shape[0]):
            state = self.cell(x[t], state)
        return (state * state).sum()


class AttentionDropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 4)).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True).sum()


class SparseInside(nn.Module):
    """A sparse intermediate has no storage of its own to check writes against."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.w
        y.relu_()
        return (y * y.detach().to_sparse().to_dense()).sum()


class Keywords(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
        return (self.fc(x) * scale).sum()


class AttentionBlock(nn.Module):
    def __init__(self, width: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln(x)).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(b, t, c)
        return x + self.mlp(x)


class Repeated(nn.Module):
    """Five blocks alike: from the third on they are stamped (capture/stamping.py), and their
    values come from their eager runs (capture/stamped_values.py)."""

    def __init__(self, block: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(block() for _ in range(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x.square().mean()


class DropoutBlock(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.fc(x))
        return torch.relu_(h * 2) + x  # written in place: recorded as its functional twin


def _hf_gpt2(attention: str) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        attn_implementation=attention,
        vocab_size=64,
        n_positions=16,
        n_embd=16,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def _ids() -> torch.Tensor:
    return torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(3))


@dataclass
class Program:
    make: Callable[[], nn.Module]
    inputs: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]
    from_trace: bool  # whether the first run can be taken from the trace
    loss: Callable[[Any], torch.Tensor] = lambda out: out
    aliasing: bool = False  # compare the first call's aliasing with the second's


def _x(*shape: int, grad: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(grad)


PROGRAMS = {
    "conv, BatchNorm in training, in-place ReLU": Program(
        lambda: ConvBN().double(), lambda: ((_x(2, 3, 6, 6),), {}), True, lambda o: o.sum()
    ),
    "writes into its input, and through a view of it": Program(
        lambda: WritesItsInput().double(),
        lambda: ((_x(4), torch.ones(4, dtype=torch.float64)), {}),
        True,
    ),
    "returns its input": Program(
        lambda: ReturnsItsInput().double(),
        lambda: ((_x(4),), {}),
        True,
        lambda o: o[1] + o[0].sum(),
        aliasing=True,
    ),
    "returns a view of its input": Program(
        lambda: ReturnsAView().double(),
        lambda: ((_x(2, 2),), {}),
        True,  # taken again of the user's tensor: the recording's is of a copy
        lambda o: o[1] + o[0].sum(),
        aliasing=True,
    ),
    "draws random numbers": Program(lambda: Draws().double(), lambda: ((_x(4),), {}), True),
    "dropout": Program(lambda: Dropout().double(), lambda: ((_x(3, 4),), {}), True),
    "reads values (.item(), a branch)": Program(
        lambda: ReadsValues().double(), lambda: ((_x(4),), {}), True
    ),
    "replaces its buffers": Program(
        lambda: ReplacesBuffers().double(), lambda: ((_x(3, 4),), {}), True
    ),
    "a custom autograd.Function": Program(
        lambda: CustomFunction().double(), lambda: ((_x(4),), {}), False
    ),
    "a view read after its base was written": Program(
        lambda: StaleView().double(), lambda: ((_x(4),), {}), True
    ),
    "a GRU cell stepped in Python": Program(
        lambda: GRUSteps().double(), lambda: ((_x(4, 2, 3),), {}), True
    ),
    "a sparse intermediate": Program(
        lambda: SparseInside().double(), lambda: ((_x(3, 4),), {}), True
    ),
    "a keyword tensor": Program(
        lambda: Keywords().double(),
        lambda: ((_x(3, 4),), {"scale": _x(4, grad=False)}),
        True,
    ),
    "repeated blocks, stamped": Program(
        lambda: Repeated(AttentionBlock).double(), lambda: ((_x(2, 6, 8),), {}), True
    ),
    # the masks drawn by their eager runs, and ReLU written in place
    "repeated blocks with dropout, stamped": Program(
        lambda: Repeated(DropoutBlock).double(), lambda: ((_x(4, 8),), {}), True
    ),
    "Hugging Face GPT-2 (tiny config, no dropout, attention written out)": Program(
        lambda: _hf_gpt2("eager"),
        lambda: ((_ids(),), {"labels": _ids()}),
        True,
        lambda o: o.loss,
    ),
    # the attention kernel the grad rule adds may draw (torch tags it so): rerun, it drew none
    "Hugging Face GPT-2 (tiny config, no dropout, scaled_dot_product_attention)": Program(
        lambda: _hf_gpt2("sdpa"),
        lambda: ((_ids(),), {"labels": _ids()}),
        True,
        lambda o: o.loss,
    ),
    # the mask is drawn by ops eager ran, which the recording holds
    "attention with dropout": Program(
        lambda: AttentionDropout().double(), lambda: ((_x(2, 5, 8),), {}), True
    ),
}


def _run(fn: Callable[..., Any], program: Program, seed: int = 7) -> dict[str, Any]:
    """One call of `fn` on fresh inputs and its backward: what a user can see of it."""
    args, kwargs = program.inputs()
    torch.manual_seed(seed)
    out = fn(*args, **kwargs)
    loss = program.loss(out)
    tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
    wanting = [t for t in tensors if t.requires_grad]
    if loss.requires_grad:
        loss.backward()
    return {
        "loss": loss.detach(),
        "next draw": torch.rand(3),
        "input grads": [t.grad for t in wanting],
        "inputs after": [t.detach().clone() for t in tensors],
        "out": out,
        "args": args,
    }


def _state(module: nn.Module) -> dict[str, Any]:
    grads = {n: p.grad for n, p in module.named_parameters()}
    return {"grads": grads, "buffers": dict(module.named_buffers())}


def _aliases(result: dict[str, Any]) -> list[Any]:
    """For each output tensor: whether it is an input, or shares an input's storage."""
    outs = [o for o in result["out"] if isinstance(o, torch.Tensor)]
    args = [a for a in result["args"] if isinstance(a, torch.Tensor)]
    return [
        (
            any(o is a for a in args),
            any(o.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in args),
        )
        for o in outs
    ]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_first_call_is_eager_s(name: str) -> None:
    program = PROGRAMS[name]
    model = program.make()
    eager, jitted_model = copy.deepcopy(model), copy.deepcopy(model)
    jitted = tv.jit(jitted_model)

    expected = _run(eager, program)
    got = _run(jitted, program)

    for key in ("loss", "next draw", "input grads", "inputs after"):
        torch.testing.assert_close(got[key], expected[key], msg=f"{name}: {key}")
    torch.testing.assert_close(_state(jitted_model), _state(eager), msg=name)
    assert jitted.last.first_run_from_trace is program.from_trace
    # a first run the recording could not give compiled the augmented forward to run it
    assert (jitted.last.run_augmented is not_compiled) is program.from_trace


@pytest.mark.parametrize("name", [n for n, p in PROGRAMS.items() if p.from_trace])
def test_the_first_call_is_bit_for_bit_what_the_compiled_run_gives(name: str) -> None:
    # Later calls run the compiled trace: the first, taken from the recording, must not
    # differ from them in a single bit (the comparison with eager above allows rounding).
    program = PROGRAMS[name]
    model = program.make()
    start = copy.deepcopy(model.state_dict())
    jitted = tv.jit(model)
    first = _run(jitted, program)
    # compiled where first needed: not by the call that traced, which ran from the recording
    assert jitted.last.run_augmented is not_compiled
    first_state = copy.deepcopy(_state(model))
    model.load_state_dict(start)  # in place: the cache entry still applies
    for p in model.parameters():
        p.grad = None
    second = _run(jitted, program)
    assert jitted.cache_misses == 1 and jitted.last.first_run_from_trace
    assert jitted.last.run_augmented is not not_compiled
    for key in ("loss", "next draw", "input grads", "inputs after"):
        torch.testing.assert_close(second[key], first[key], rtol=0, atol=0, msg=key)
    torch.testing.assert_close(_state(model), first_state, rtol=0, atol=0)


@pytest.mark.parametrize("name", [n for n, p in PROGRAMS.items() if p.aliasing])
def test_the_first_call_aliases_as_the_compiled_run_does(name: str) -> None:
    program = PROGRAMS[name]
    jitted = tv.jit(program.make())
    first = _run(jitted, program)
    second = _run(jitted, program)
    assert jitted.cache_misses == 1
    assert _aliases(first) == _aliases(second)
