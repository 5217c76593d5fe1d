"""`thunderviz.jit` replays a trace only when nothing it specialised on changed: every
result and gradient here is compared with eager PyTorch on the same calls."""

from __future__ import annotations

import copy
import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from tests.helpers import assert_same, value_and_grads
from thunderviz.core.run_errors import bsym_at_line

F64 = dict(dtype=torch.float64)


# --- the cache: bounded, and says when it retraces too often --------------------------------


def test_cache_is_an_lru_of_the_given_size_and_warns_once_when_it_keeps_retracing():
    model = nn.Linear(4, 2).double()
    jitted = tv.jit(model, cache_size=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 7):
            jitted(torch.randn(n, 4, **F64))
    assert sum(len(v) for v in jitted._cache.values()) == 3
    retrace = [w for w in caught if "has traced" in str(w.message)]
    assert len(retrace) == 1
    assert "cache_size=3" in str(retrace[0].message) and "positional arguments" in str(
        retrace[0].message
    )
    x = torch.randn(6, 4, **F64)
    jitted(x)  # the most recent shapes are still cached
    assert jitted.cache_misses == 6
    jitted(torch.randn(1, 4, **F64))  # the oldest was evicted
    assert jitted.cache_misses == 7


# --- values read into Python: guards checked on every call ----------------------------------


def branchy(x, w):
    y = x @ w
    if y.sum() > 0:
        return (y.relu() * 2).sum()
    return y.sin().sum()


def test_a_data_dependent_branch_flips_both_ways_with_eager_gradients():
    torch.manual_seed(0)
    w = torch.randn(4, 5, **F64, requires_grad=True)
    jitted = tv.jit(branchy)
    positive = torch.rand(3, 4, **F64)
    signs = [1, -1, 1, -1, -1, 1]
    for s in signs:
        x = positive * s * (1 + torch.rand(()))
        assert_same(value_and_grads(jitted, x, w), value_and_grads(branchy, x, w))
    assert jitted.cache_misses == 2  # one trace per branch, both kept under one key
    assert jitted.guard_failures == 4  # each flip is caught by the guard, then the other trace
    augmented = tv.last_traces(jitted)[1]
    assert "thunderviz_guard_value(" in str(augmented)


def counted(x, w):
    n = int((x > 0).sum().item())  # a count read into Python
    positions = (x > 0).nonzero()  # a size chosen by values
    first = x.tolist()[0]  # values read into Python
    with torch.no_grad():
        offset = positions.sum().to(w.dtype)
    return (w[:n] * first).sum() + offset * w[-1]


def test_item_tolist_and_nonzero_sizes_are_guarded():
    w = torch.randn(5, **F64, requires_grad=True)
    jitted = tv.jit(counted)
    first, more_positive, other_first = [1.0, -1, 2, 3, -4], [1.0, 1, 2, 3, -4], [2.0, 1, 2, 3, -4]
    for values in (first, first, more_positive, other_first, first, more_positive):
        x = torch.tensor(values, **F64)
        assert_same(value_and_grads(jitted, x, w), value_and_grads(counted, x, w))
    # a new count and nonzero size, then a new list: one trace each, all three kept
    assert jitted.cache_misses == 3


def test_a_failed_guard_undoes_the_random_draws_of_the_attempt():
    def f(x, w):
        y = F.dropout(x @ w, p=0.5, training=True)
        if y.sum() > 0:
            return (y * 2).sum()
        return y.cos().sum()

    w = torch.randn(4, 4, **F64, requires_grad=True)
    jitted = tv.jit(f)
    jitted(torch.ones(2, 4, **F64), w)
    for seed in range(6):
        x = torch.randn(2, 4, **F64)
        torch.manual_seed(seed)
        want = value_and_grads(f, x, w)
        after_eager = torch.rand(1)
        torch.manual_seed(seed)
        got = value_and_grads(jitted, x, w)
        assert_same(got, want)
        torch.testing.assert_close(torch.rand(1), after_eager, rtol=0, atol=0)
    assert jitted.guard_failures > 0


# --- autocast and grad mode --------------------------------------------------------------


def _small_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))


@pytest.mark.parametrize(
    "device,dtype",
    [("cpu", torch.bfloat16)]
    + ([("cuda", torch.float16), ("cuda", torch.bfloat16)] if torch.cuda.is_available() else []),
)
def test_autocast_training_matches_eager_for_three_steps(device, dtype):
    eager = _small_net().to(device)
    model = copy.deepcopy(eager)
    jitted = tv.jit(model)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_j = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 8, device=device)
    y = torch.randint(0, 4, (5,), device=device)
    for _ in range(3):
        losses = []
        for fn, opt in ((eager, opt_e), (jitted, opt_j)):
            opt.zero_grad()
            with torch.autocast(device, dtype=dtype):
                out = fn(x)
                loss = F.cross_entropy(out, y)
            assert out.dtype == dtype
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=0, atol=0)
        for pe, pj in zip(eager.parameters(), model.parameters(), strict=True):
            assert pj.grad.dtype == pe.grad.dtype
            torch.testing.assert_close(pj.grad, pe.grad, rtol=0, atol=0)
    forward = tv.last_traces(jitted)[0]
    casts = [
        b.kwargs["dtype"] for b in forward.bound_symbols if b.sym.id == "aten._to_copy.default"
    ]
    # visible, top level: down to the autocast dtype, and (CUDA's autocast runs layer_norm
    # in float32) back up
    assert dtype in casts and set(casts) <= {dtype, torch.float32}
    out = jitted(x)  # outside autocast: a trace of its own, in float32
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, eager(x), rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_call_on_another_device_gets_its_own_trace_cuda():
    """The same program called on the CPU and on a GPU in turn: each device's call runs a
    trace made for it (a constant made inside lands on the argument's device), to eager's
    values and gradients."""

    def program(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * torch.arange(3, device=x.device, dtype=x.dtype)).sum()

    jitted = tv.jit(program)
    for device in ("cpu", "cuda", "cpu", "cuda"):
        x = torch.randn(4, 3, **F64, device=device, requires_grad=True)
        got, want = value_and_grads(jitted, x), value_and_grads(program, x)
        assert got[0].device.type == device
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert jitted.cache_misses == 2


def test_grad_mode_is_part_of_the_key():
    model = nn.Linear(3, 2).double()
    jitted = tv.jit(model)
    x = torch.randn(4, 3, **F64)
    with torch.no_grad():
        assert not jitted(x).requires_grad
    assert jitted(x).requires_grad
    assert jitted.cache_misses == 2


def picks_by_determinism(x):  # as torch's own F.pad(mode="replicate") does on a GPU
    return x * 2 if torch.are_deterministic_algorithms_enabled() else x * 3


def test_deterministic_algorithms_are_part_of_the_key():
    jitted, x = tv.jit(picks_by_determinism), torch.randn(3, **F64)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        for flag in (False, True, False):
            torch.use_deterministic_algorithms(flag)
            torch.testing.assert_close(jitted(x), picks_by_determinism(x), rtol=0, atol=0)
    finally:
        torch.use_deterministic_algorithms(was)
    assert jitted.cache_misses == 2


# --- module hooks and training flags ------------------------------------------------------


def test_forward_hooks_of_the_module_run_on_every_call_as_in_eager():
    eager = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).double()
    model = copy.deepcopy(eager)
    jitted = tv.jit(model)
    seen_e, seen_j = [], []
    for m, seen in ((eager, seen_e), (model, seen_j)):
        m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
        m.register_forward_hook(lambda mod, args, out, seen=seen: seen.append(out) or out + 1)
    x = torch.randn(2, 4, **F64)
    for _ in range(3):
        torch.testing.assert_close(jitted(x), eager(x), rtol=0, atol=0)
    assert len(seen_j) == len(seen_e) == 3
    assert seen_j[-1].grad_fn is not None  # the hook saw the real, differentiable output
    later = model.register_forward_hook(lambda mod, args, out: out * 10)
    later_e = eager.register_forward_hook(lambda mod, args, out: out * 10)
    torch.testing.assert_close(jitted(x), eager(x), rtol=0, atol=0)  # a hook added later runs
    later.remove()
    later_e.remove()
    out = jitted(x)
    torch.testing.assert_close(out, eager(x), rtol=0, atol=0)  # ... and stops when removed
    out.sum().backward()
    eager(x).sum().backward()
    for pe, pj in zip(eager.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(pj.grad, pe.grad, rtol=1e-12, atol=1e-14)  # tanh's rule
    assert jitted.cache_misses == 1  # the module's own hooks never needed a retrace


def test_a_hook_added_to_a_submodule_later_retraces_and_warns():
    eager = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    model = copy.deepcopy(eager)
    jitted = tv.jit(model)
    x = torch.randn(2, 4, **F64)
    torch.testing.assert_close(jitted(x), eager(x), rtol=0, atol=0)
    handles = [m[1].register_forward_hook(lambda mod, args, out: out * 3) for m in (model, eager)]
    with pytest.warns(UserWarning, match=r"forward hooks of submodules \(1\)"):
        torch.testing.assert_close(jitted(x), eager(x), rtol=0, atol=0)
    for h in handles:
        h.remove()
    torch.testing.assert_close(jitted(x), eager(x), rtol=0, atol=0)
    assert jitted.cache_misses == 2  # without the hook, the first trace holds again


def test_toggling_a_submodule_training_flag_retraces():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1)).double()
    model = copy.deepcopy(eager)
    jitted = tv.jit(model)
    x = torch.randn(6, 4, **F64)
    for training in (True, False, True):
        eager[1].train(training)
        model[1].train(training)
        torch.manual_seed(1)
        want = eager(x)
        torch.manual_seed(1)
        torch.testing.assert_close(jitted(x), want, rtol=0, atol=0)
    assert jitted.cache_misses == 2


# --- errors while a trace runs name the bound symbol, line and module -----------------------


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, idx):
        return self.emb(idx).sum()


def test_a_runtime_error_names_the_op_the_line_and_the_module():
    jitted = tv.jit(Embedder())
    jitted(torch.tensor([1, 2, 3]))
    with pytest.raises(IndexError) as info:  # the type eager raises, unchanged
        jitted(torch.tensor([1, 2, 30]))  # same metadata, an index out of range
    note = "\n".join(info.value.__notes__)
    assert "augmented_forward trace" in note and "embedding" in note
    assert "test_guards.py" in note and "self.emb(idx)" in note and "'emb'" in note


def test_every_statement_line_of_a_compiled_backward_maps_to_its_bound_symbol():
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).double()
    jitted = tv.jit(model)
    jitted(torch.randn(2, 4, **F64)).sum().backward()
    (backward,) = tv.last_backward_traces(jitted)
    lines = backward.python(print_depth=0).splitlines()
    statements = [i for i, text in enumerate(lines, 1) if re.match(r"\s+t\d+ = aten\.", text)]
    assert len(statements) > 5
    for lineno in statements:
        bsym = bsym_at_line(backward, lineno)
        assert bsym is not None and lines[lineno - 1].strip().startswith(
            ", ".join(p.name for p in bsym.flat_proxy_outs) or "_"
        )
        assert bsym.fwd_bsym is not None and bsym.fwd_bsym.source is not None


def masked_loss(pred, target, w):
    out = pred @ w
    mask = target >= 0  # how many targets count changes from batch to batch
    selected = out[mask]
    return (selected - target[mask].to(selected.dtype)).pow(2).mean()


def test_boolean_mask_indexing_with_a_changing_count_matches_eager():
    torch.manual_seed(0)
    w = torch.randn(4, 1, **F64, requires_grad=True)
    jitted = tv.jit(masked_loss)
    for labels in ([1, -1, 2, 3], [3, -1, 0, 1], [1, 1, -2, -3], [1, -1, 2, 3], [-1, -1, -1, 5]):
        pred = torch.randn(4, 4, **F64)
        target = torch.tensor(labels).unsqueeze(1)
        assert_same(
            value_and_grads(jitted, pred, target, w), value_and_grads(masked_loss, pred, target, w)
        )
    assert jitted.cache_misses == 3  # counts 3, 2, 1: one trace each, reused when they recur
    assert "thunderviz_guard_size(" in str(tv.last_traces(jitted)[1])


def test_a_full_backward_hook_on_the_module_runs_on_every_backward_as_in_eager():
    eager = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).double()
    model = copy.deepcopy(eager)
    jitted = tv.jit(model)
    grads_e, grads_j = [], []
    eager.register_full_backward_hook(lambda mod, gin, gout: grads_e.append((gin[0], gout[0])))
    model.register_full_backward_hook(lambda mod, gin, gout: grads_j.append((gin[0], gout[0])))
    x = torch.randn(2, 4, **F64, requires_grad=True)
    for _ in range(2):
        (jitted(x) * 3).sum().backward()
        (eager(x) * 3).sum().backward()
    assert len(grads_j) == len(grads_e) == 2
    torch.testing.assert_close(grads_j[-1][1], grads_e[-1][1], rtol=0, atol=0)  # grad of output
    torch.testing.assert_close(grads_j[-1][0], grads_e[-1][0], rtol=1e-12, atol=1e-14)  # of input


def test_a_non_full_backward_hook_on_a_submodule_is_refused_by_name():
    """Full ones run in the backward trace (test_module_backward_hooks.py); the deprecated
    non-full form hooks torch's own graph nodes, which a trace has not."""
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh())
    model[0].register_backward_hook(lambda mod, gin, gout: None)
    with pytest.raises(NotImplementedError, match=r"backward hooks on submodules \(0\)"):
        tv.jit(model)(torch.randn(2, 4))


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.drop = nn.Dropout(0.5)
        self.scale = 2.0  # a plain attribute the forward reads

    def forward(self, x):
        return (self.drop(self.fc(x)) * self.scale).sum()


def test_a_changed_module_attribute_retraces():
    torch.manual_seed(0)
    eager = Scaled().double()
    model = copy.deepcopy(eager)
    jitted = tv.jit(model)
    x = torch.randn(5, 4, **F64)
    for change in (None, ("scale", 3.0), ("p", 0.0), None):
        if change is not None:
            name, value = change
            for m in (eager, model):
                setattr(m if name == "scale" else m.drop, name, value)
        torch.manual_seed(3)
        want = value_and_grads(lambda x, w: eager(x), x, eager.fc.weight)
        torch.manual_seed(3)
        got = value_and_grads(lambda x, w: jitted(x), x, model.fc.weight)
        assert_same(got, want)
    assert jitted.cache_misses == 3
    assert "drop.p" in jitted.last_retrace_reason and "0.5" in jitted.last_retrace_reason


class PrivatelyScaled(nn.Module):
    """Underscored attributes are the module's own too (a property's backing field)."""

    def __init__(self) -> None:
        super().__init__()
        self._temperature = 1.0
        self._mode = "sin"

    @property
    def temperature(self) -> float:
        return self._temperature * 2

    def forward(self, x):
        return getattr(torch, self._mode)(x / self.temperature).sum()


def test_a_changed_underscored_module_attribute_retraces():
    x = torch.randn(3, **F64, requires_grad=True)
    model = PrivatelyScaled()
    jitted = tv.jit(model)
    for name, value in ((None, None), ("_temperature", 4.0), ("_mode", "cos")):
        if name is not None:
            setattr(model, name, value)
        assert_same(value_and_grads(jitted, x), value_and_grads(model, x))
    assert jitted.cache_misses == 3 and "_mode" in jitted.last_retrace_reason


def test_a_submodule_replaced_after_the_first_call_is_used():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()
    model = copy.deepcopy(eager)
    jitted = tv.jit(model)
    x = torch.randn(5, 4, **F64)
    torch.testing.assert_close(jitted(x), eager(x), rtol=0, atol=0)
    head = nn.Linear(3, 2).double()  # a new head, same shapes: fine-tuning's usual move
    eager[2], model[2] = head, copy.deepcopy(head)
    out = jitted(x)
    torch.testing.assert_close(out, eager(x), rtol=0, atol=0)
    out.sum().backward()
    assert model[2].weight.grad is not None


SCALE = 2.0  # a module-level constant the jitted function reads


def reads_a_global(x):
    return (x * SCALE).sin().sum()


def test_a_changed_global_or_closure_value_retraces():
    global SCALE
    x = torch.randn(3, **F64, requires_grad=True)
    jitted = tv.jit(reads_a_global)
    try:
        for value in (2.0, 3.0, 2.0):
            SCALE = value
            assert_same(value_and_grads(jitted, x), value_and_grads(reads_a_global, x))
    finally:
        SCALE = 2.0
    assert jitted.cache_misses == 2
    shift = 1

    def closure(x):
        return (x + shift).cos().sum()

    jitted = tv.jit(closure)
    for shift in (1, 5):  # noqa: B007 - the closure reads the loop variable
        assert_same(value_and_grads(jitted, x), value_and_grads(closure, x))
    assert jitted.cache_misses == 2 and "shift" in jitted.last_retrace_reason


def test_the_functional_api_names_the_bound_symbol_of_a_runtime_error():
    """vjp runs its traces too: a cotangent of the wrong shape fails in the backward, and the
    error names the op it reached, the user's line and the module."""
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).double()
    x = torch.randn(2, 4, **F64)
    with pytest.raises(RuntimeError) as info:
        tv.vjp(model)((x,), (torch.ones(5, **F64),))
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert "backward trace" in note and "tanh" in note, note
    assert "in module '1'" in note, note
