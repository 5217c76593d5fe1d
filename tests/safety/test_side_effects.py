"""The debugger is side-effect free: every public entry point leaves the user's model
(parameters, buffers, flags, .grad, hooks), inputs, random number generators and torch's
global state exactly as it found them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import thunderviz as tv


class Net(nn.Module):
    """BatchNorm (running statistics, a counter), dropout (draws from the global RNG) and
    noise from a generator of the module's own."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), nn.Tanh(), nn.Linear(8, 1)
        )
        self.gen = torch.Generator(device).manual_seed(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(x.shape[0], 1, generator=self.gen, device=x.device)
        return (self.body(x) + 1e-3 * noise).sum()


def _global_state() -> dict[str, Any]:
    hooks = nn.modules.module
    return {
        "default_dtype": torch.get_default_dtype(),
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn": torch.is_deterministic_algorithms_warn_only_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "threads": torch.get_num_threads(),
        "autocast_cpu": torch.is_autocast_enabled("cpu"),
        "function_modes": torch._C._len_torch_function_stack(),
        "dispatch_modes": torch._C._len_torch_dispatch_stack(),
        "global_hooks": [
            len(getattr(hooks, n))
            for n in dir(hooks)
            if n.startswith("_global_") and isinstance(getattr(hooks, n), dict)
        ],
        "cudnn": (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark),
    }


def _tensor(t: torch.Tensor | None) -> Any:
    return None if t is None else (t.detach().clone(), t.requires_grad, t.dtype, t.device)


def _snapshot(model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    return {
        "params": [
            (n, _tensor(p), _tensor(p.grad), dict(p._backward_hooks or {}).keys())
            for n, p in model.named_parameters()
        ],
        "buffers": [(n, _tensor(b)) for n, b in model.named_buffers()],
        "modules": [
            (
                n,
                m.training,
                tuple(
                    len(getattr(m, h))
                    for h in (
                        "_forward_hooks",
                        "_forward_pre_hooks",
                        "_backward_hooks",
                        "_backward_pre_hooks",
                        "_state_dict_hooks",
                        "_load_state_dict_pre_hooks",
                    )
                ),
            )
            for n, m in model.named_modules()
        ],
        "input": (_tensor(x), _tensor(x.grad)),
        "rng": torch.random.get_rng_state(),
        "own_rng": model.gen.get_state() if isinstance(model, Net) else None,
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "global": _global_state(),
    }


def _assert_same(before: Any, after: Any, where: str = "") -> None:
    if isinstance(before, torch.Tensor):
        assert isinstance(after, torch.Tensor) and before.dtype == after.dtype, where
        assert torch.equal(before, after), f"{where} changed"
    elif isinstance(before, (list, tuple)):
        assert type(before) is type(after) and len(before) == len(after), where
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            _assert_same(b, a, f"{where}[{i}]")
    elif isinstance(before, dict):
        assert before.keys() == after.keys(), where
        for k in before:
            _assert_same(before[k], after[k], f"{where}.{k}")
    else:
        assert before == after, f"{where}: {before!r} -> {after!r}"


def _session(model, x):
    return tv.Session(model, x)


def _stepping(model, x):
    s = tv.Session(model, x)
    s.stepper.step()
    s.stepper.step_over()
    s.stepper.back()
    s.stepper.continue_()
    s.stepper.reset()
    s.stepper.run_to(len(s.stepper) - 1)


def _intervening(model, x):
    s = tv.Session(model, x)
    s.intervene("body.0", ("scale", 2.0))
    s.grads()
    s.clear_interventions()


ENTRY_POINTS: dict[str, Callable[..., Any]] = {
    "trace": lambda m, x, _: tv.trace(m, x),
    "Session": lambda m, x, _: _session(m, x),
    "record_backward": lambda m, x, _: _session(m, x).record_backward(),
    "stepping": lambda m, x, _: _stepping(m, x),
    "compare_with_autograd": lambda m, x, _: _session(m, x).compare_with_autograd(),
    "autograd_reference": lambda m, x, _: _session(m, x).autograd_reference(),
    "grad_flow": lambda m, x, _: _session(m, x).grad_flow(),
    "grads": lambda m, x, _: _session(m, x).grads(),
    "nan_ledger": lambda m, x, _: _session(m, x).nan_ledger(),
    "first_nan": lambda m, x, _: _session(m, x).first_nan(),
    "check_gradients": lambda m, x, _: _session(m, x).check_gradients(),
    "intervene": lambda m, x, _: _intervening(m, x),
    "document": lambda m, x, _: _session(m, x).document(),
    "save": lambda m, x, tmp: tv.save(_session(m, x), tmp / "run.tvz"),
    "show": lambda m, x, _: tv.show(m, x),
    "export_html": lambda m, x, tmp: tv.export_html(m, tmp / "run.html", x),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_entry_point_leaves_everything_as_it_was(entry, tmp_path):
    torch.manual_seed(0)
    model = Net().train()
    x = torch.randn(6, 4, requires_grad=True)
    next(model.parameters()).grad = torch.full((8, 4), 0.5)  # a .grad the user already has
    model.body[0].register_forward_hook(lambda *_: None)  # a hook the user has
    before = _snapshot(model, x)
    ENTRY_POINTS[entry](model, x, tmp_path)
    _assert_same(before, _snapshot(model, x), entry)


class SharedBlock(nn.Module):
    """One block at two paths (`Sequential(block, block, ...)`: a block applied twice)."""

    def __init__(self) -> None:
        super().__init__()
        block = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Tanh())
        self.body = nn.Sequential(block, block, nn.Linear(4, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).sum()


@pytest.mark.parametrize("entry", [*ENTRY_POINTS, "jit"])
def test_a_block_at_two_paths_keeps_its_own_parameters_and_buffers(entry, tmp_path):
    """torch's reparametrization swapped such a block's tensors in twice and back once: the
    model was left holding the trace's stand-ins (plain tensors, no grad), and trained no
    more even eagerly (core/module_state.py)."""
    torch.manual_seed(0)
    model = SharedBlock().train()
    x = torch.randn(6, 4, requires_grad=True)  # (body.0's first call hands it a gradient)
    own = dict([*model.named_parameters(), *model.named_buffers()])
    if entry == "jit":
        tv.jit(model)(x).backward()
    else:
        ENTRY_POINTS[entry](model, x, tmp_path)
    after = dict([*model.named_parameters(), *model.named_buffers()])
    assert after.keys() == own.keys()
    assert all(after[name] is tensor for name, tensor in own.items()), entry
    model.zero_grad(set_to_none=True)
    model(x).backward()  # eager training still reaches every parameter
    assert all(p.grad is not None for p in model.parameters())


def test_debugger_draws_what_eager_draws():
    """The stepper's forward and the autograd reference both start from the user's RNG state:
    with dropout they agree (they did not when the first run advanced the generator)."""
    torch.manual_seed(1)
    model = Net().train()
    x = torch.randn(6, 4)
    comparisons = tv.Session(model, x).compare_with_autograd()
    assert comparisons and all(c.allclose for c in comparisons), comparisons
    # ... and what eager draws next is untouched by the debugger having run.
    state = torch.random.get_rng_state()
    expected = torch.rand(3)
    torch.random.set_rng_state(state)
    tv.Session(model, x).record_backward()
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("entry", ["record_backward", "compare_with_autograd", "export_html"])
def test_entry_point_leaves_everything_as_it_was_cuda(entry, tmp_path):
    """On CUDA dropout draws from the device's generator: it is restored too."""
    torch.manual_seed(0)
    model = Net("cuda").train().cuda()
    x = torch.randn(6, 4, device="cuda", requires_grad=True)
    before = _snapshot(model, x)
    ENTRY_POINTS[entry](model, x, tmp_path)
    _assert_same(before, _snapshot(model, x), entry)
