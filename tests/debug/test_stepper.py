"""The backward stepper against torch.autograd, and its stepping / breakpoint behaviour."""

from __future__ import annotations

import copy
import inspect
import math

import pytest
import torch

import thunderviz as tv
from tests.debug.models import ResidualMLP, SqrtOfRelu, line_of
from tests.helpers import autograd_reference
from thunderviz.debug import BackwardStepper, Session, autograd_grads, trace_arg_values
from thunderviz.models import GPT, MLP, GPTConfig


def _stepper(module, *args, cotangents=None):
    forward = tv.trace(module, *args)
    result = tv.autodiff(forward)
    return BackwardStepper(result, trace_arg_values(forward, module, args), cotangents)


def _assert_matches(ours: dict, reference: dict) -> None:
    assert reference, "no reference gradients"
    for name, ref in reference.items():
        got = ours[name]
        if ref is None:
            assert got is None or not torch.any(got != 0), name
            continue
        assert got is not None, f"{name}: autograd has a gradient, the stepper none"
        torch.testing.assert_close(
            got, ref, rtol=1e-10, atol=1e-12, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.fixture(scope="module")
def mlp_case():
    torch.manual_seed(0)
    m = MLP().double()
    x = torch.randn(6, 8, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([0, 1, 2, 3, 1, 0])
    return m, (x, target)


def test_mlp_final_grads_equal_torch_autograd(mlp_case):
    m, args = mlp_case
    s = _stepper(m, *args)
    s.finish()
    assert s.done
    _, ref = autograd_reference(m, *args)
    ours = dict(s.grads)
    ours["input0"] = ours.pop("x")
    _assert_matches(ours, ref)
    assert s.grads["target"] is None  # an integer input


def test_non_scalar_output_takes_given_cotangents():
    torch.manual_seed(1)
    m = MLP().double()
    x = torch.randn(5, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="cotangents"):
        _stepper(m, x)
    ct = torch.randn(5, 4, dtype=torch.float64)
    s = _stepper(m, x, cotangents=[ct])
    s.finish()
    _assert_matches(s.grads, autograd_reference(m, x, cotangent=ct)[1])


def test_small_gpt_final_grads_equal_torch_autograd_float64():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=40, block_size=8, n_layer=2, n_head=2, d_model=16)
    m = GPT(cfg).double()
    idx = torch.randint(0, 40, (2, 8))
    s = _stepper(m, idx, idx)
    s.finish()
    _, ref = autograd_reference(m, idx, idx)
    assert "wte_weight" in ref and "lm_head_weight" not in ref  # tied: one parameter
    _assert_matches(s.grads, ref)


def test_autograd_helper_agrees_with_plain_autograd(mlp_case):
    m, args = mlp_case
    forward = tv.trace(m, *args)
    helper = autograd_grads(forward, m, args)
    _, plain = autograd_reference(m, *args)
    plain["x"] = plain.pop("input0")
    for name, g in plain.items():
        torch.testing.assert_close(helper[name], g)
    assert all(p.grad is None for p in m.parameters())  # the user's module is untouched


def test_each_parameter_grad_is_finished_once_and_matches_autograd(mlp_case):
    m, args = mlp_case
    s = _stepper(m, *args)
    _, ref = autograd_reference(m, *args)
    ref["x"] = ref.pop("input0")
    finished: dict[str, int] = {}
    while not s.done:
        rec = s.step()
        for name, st in rec.grads.items():
            assert name not in finished, f"{name} finished twice"
            finished[name] = rec.index
            # the value is final the moment it is finished
            torch.testing.assert_close(s.grads[name], ref[name], rtol=1e-10, atol=1e-12)
            assert st.norm == pytest.approx(float(ref[name].norm()), rel=1e-9)
        for name in finished:  # and it stays so
            assert s.grads[name] is not None
    assert set(finished) == {n for n, g in ref.items() if g is not None}
    assert len(s.history) == len(s.bsyms) == s.index


def test_back_restores_the_state_before_the_step(mlp_case):
    m, args = mlp_case
    s = _stepper(m, *args)
    for _ in range(4):
        s.step()
    index, current = s.index, s.current
    known = {name: s.value(name) for rec in s.history for name in rec.produced}
    later = [s.step() for _ in range(6)]
    produced_later = [n for rec in later for n in rec.produced]
    values_later = {n: s.value(n) for n in produced_later}
    for _ in range(6):
        s.back()
    assert s.index == index and s.current is current and len(s.history) == index
    for name in produced_later:
        if name not in known:
            with pytest.raises(KeyError):
                s.value(name)
    for name, v in known.items():
        assert s.value(name) is v
    again = [s.step() for _ in range(6)]
    assert [r.index for r in again] == [r.index for r in later]
    for name, v in values_later.items():
        assert torch.equal(s.value(name), v)
    s.reset()
    assert s.index == 0 and s.history == [] and s.back() is None


def test_breakpoint_on_an_op_fires_after_it_runs(mlp_case):
    m, args = mlp_case
    s = _stepper(m, *args)
    target = len(s.bsyms) // 2
    s.break_on_op(target)
    rec = s.continue_()
    assert rec.index == target and s.index == target + 1
    assert "breakpoint" in rec.note and s.stop_reason == rec.note
    assert s.continue_() is not None and s.done  # no other breakpoint: to the end
    # by op id, and through a forward op: the first backward step derived from it
    s.reset()
    s.clear_breakpoints()
    linear = next(b for b in s.result.forward.bound_symbols if b.module_path == "fc2")
    s.break_on_op(linear)
    rec = s.continue_()
    first = next(i for i, b in enumerate(s.bsyms) if b.fwd_bsym is linear)
    assert rec.index == first
    fwd_id = f"forward:{s.result.forward.bound_symbols.index(linear)}"
    assert s.breakpoints["ops"] == [fwd_id]
    s.reset()
    s.set_breakpoints(
        {"ops": [f"backward:{first + 1}"], "modules": [], "nan_inf": False, "grad_norm_above": None}
    )
    assert s.continue_().index == first + 1
    # a subsymbol's id names its top-level op; what is not an op id is refused
    s.reset()
    s.set_breakpoints({"ops": [fwd_id + ".0"]})
    assert s.continue_().index == first
    for bad in ("backward:x", f"backward:{first}.x", "backward:-1", "module:fc2", "fc2"):
        with pytest.raises(ValueError, match="not an op id"):
            s.break_on_op(bad)


def test_breakpoints_read_back_what_they_write(mlp_case):
    m, args = mlp_case
    s = _stepper(m, *args)
    spec = {
        "ops": ["backward:2", "forward:1"],
        "modules": ["fc1"],
        "nan_inf": True,
        "grad_norm_above": 3.0,
    }
    s.set_breakpoints({**spec, "modules": ["module:fc1"]})  # the viewer's module ids too
    assert s.breakpoints == spec
    off = {"ops": [], "modules": [], "nan_inf": False, "grad_norm_above": None}
    s.set_breakpoints({"grad_norm_above": True})  # not a number: off, like the rest
    assert s.breakpoints == off
    for bad in (float("inf"), float("nan")):  # JSON has no such numbers
        s.set_breakpoints({"grad_norm_above": bad})
        assert s.breakpoints == off


def test_module_breakpoint_fires_on_entering_the_module(mlp_case):
    m, args = mlp_case
    s = _stepper(m, *args)
    s.break_on_module("fc1")
    rec = s.continue_()
    assert rec.module_path == "fc1"
    assert s.history[-2].module_path != "fc1"
    assert all(r.module_path != "fc1" for r in s.history[:-1])
    s.break_on_module("fc1", enabled=False)
    s.continue_()
    assert s.done


def test_nan_and_norm_breakpoints(mlp_case):
    m, args = mlp_case
    s = _stepper(m, *args)
    s.break_on_nan(True)
    s.continue_()
    assert s.done and s.first_nan() is None  # a clean model never stops
    s.reset()
    s.break_on_nan(False)
    s.break_on_grad_norm(0.0)
    rec = s.continue_()
    assert rec.index > 0 and rec.max_norm > 0 and rec.note.startswith("norm >")
    assert all(r.max_norm <= 0 or r.index == 0 for r in s.history[:-1])
    s.reset()
    s.break_on_grad_norm(1e30)
    s.continue_()
    assert s.done


def test_run_to_and_step_over(mlp_case):
    m, args = mlp_case
    s = _stepper(m, *args)
    k = len(s.bsyms) - 3
    rec = s.run_to(k)
    assert rec.index == k and s.index == k + 1 and s.stop_reason == "reached target"
    rec = s.run_to(3)  # already ran: steps back to it
    assert rec.index == 3 and s.index == 4
    # step over: run the current op's whole module, stop before the first op outside it
    s.reset()
    while s.current is not None and s.current.module_path != "head":
        s.step()
    start = s.index
    s.step_over()
    assert s.index > start
    assert all(r.module_path == "head" for r in s.history[start:])
    assert s.current is None or s.current.module_path != "head"


def test_first_nan_reports_the_users_sqrt_line():
    torch.manual_seed(0)
    m = SqrtOfRelu().double()
    x = torch.randn(8, 4, dtype=torch.float64)
    with torch.no_grad():
        assert (torch.relu(m.fc(x)) == 0).any()  # the model really takes sqrt(0)
    s = _stepper(m, x)
    s.break_on_nan(True)
    rec = s.continue_()
    assert rec is not None and rec.has_nan_or_inf and "NaN/Inf" in rec.note
    first = s.first_nan()
    assert first is rec
    assert first.source is not None
    assert first.source.filename == inspect.getsourcefile(SqrtOfRelu)
    assert first.source.lineno == line_of(SqrtOfRelu.forward, "torch.sqrt(h)")
    assert first.fwd_bsym is not None and first.fwd_bsym.sym.id == "torch.sqrt"
    assert all(not r.has_nan_or_inf for r in s.history[:-1])
    # torch.autograd sees the same infinity flowing through the sqrt
    h = torch.relu(m.fc(x)).detach().requires_grad_(True)
    (g,) = torch.autograd.grad(m.out(torch.sqrt(h)).sum(), h)
    assert torch.isinf(g).any()


def test_session_steps_and_compares_with_autograd():
    torch.manual_seed(0)
    m = ResidualMLP().double()
    x = torch.randn(5, 8, dtype=torch.float64)
    session = Session(m, x)
    rows = session.compare_with_autograd()
    assert rows and all(close for _, _, close in rows)
    assert all(diff < 1e-12 for _, diff, _ in rows if not math.isnan(diff))
    st = session.stepper
    assert st.index == 0 and session.stepper is st
    steps = session.record_backward()
    assert len(steps) == len(session.backward.bound_symbols) and st.index == 0
    assert session.forward_stats  # every forward tensor got statistics


def test_stepper_needs_one_value_per_forward_argument(mlp_case):
    m, args = mlp_case
    result = tv.autodiff(tv.trace(m, *args))
    with pytest.raises(ValueError, match="one value per forward argument"):
        BackwardStepper(result, list(args))


class LogThenSquare(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.log(self.fc(x))
        return (y * y).sum()


def test_first_nan_in_a_saved_forward_value_points_at_the_forward_line():
    torch.manual_seed(0)
    m = LogThenSquare().double()
    x = torch.randn(4, 3, dtype=torch.float64)
    with torch.no_grad():
        assert (m.fc(x) < 0).any()  # log of a negative number: NaN in the forward already
    s = _stepper(m, x)
    first = s.first_nan()
    assert first is not None and first.index == 0  # the unpack of saved_for_backward
    assert first.source.lineno == line_of(LogThenSquare.forward, "torch.log(")
    assert first.fwd_bsym.sym.id == "torch.log"
    assert s.index == 1  # the stepper stopped right there


def test_keyword_inputs_and_plain_functions():
    def f(x, *, w):
        return (torch.tanh(x @ w) * x.sum()).sum()

    torch.manual_seed(0)
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    session = Session(f, x, w=w)
    st = session.new_stepper()
    st.finish()
    gx, gw = torch.autograd.grad(f(x, w=w), [x, w])
    torch.testing.assert_close(st.grads["x"], gx)
    torch.testing.assert_close(st.grads["w"], gw)
    assert all(close for _, _, close in session.compare_with_autograd())


def test_fake_sessions_have_a_forward_only():
    from thunderviz.models import MLP as _MLP

    session = Session(_MLP(), torch.randn(2, 8), fake=True)
    assert session.result is None and session.grad_flow() == {}
    with pytest.raises(RuntimeError, match="fake=True"):
        session.stepper  # noqa: B018
    doc = session.document()
    assert set(doc["traces"]) == {"forward"} and doc["saved"] == []


def _returned_twice(x, w):
    y = (x * w).sin()
    return y, y * 2, y


def test_an_output_returned_twice_takes_a_cotangent_per_place_as_autograd_does():
    """`return y, ..., y`: one cotangent per place the program returns a tensor at, summed for
    a tensor returned twice, as torch.autograd.grad sums them; the session's gradients and
    its autograd reference both agree with torch's own call."""
    x = torch.randn(3, dtype=torch.float64)
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    cts = [torch.randn(3, dtype=torch.float64) for _ in range(3)]
    leaf = w.detach().clone().requires_grad_()
    (theirs,) = torch.autograd.grad(_returned_twice(x, leaf), leaf, cts)
    session = Session(_returned_twice, x, w, cotangents=cts)
    torch.testing.assert_close(session.grads()["w"], theirs, rtol=0, atol=1e-12)
    torch.testing.assert_close(session.autograd_reference()["w"], theirs, rtol=0, atol=1e-12)
    assert all(c.allclose for c in session.compare_with_autograd())
    with pytest.raises(ValueError, match="for 2 output tensors"):  # neither count
        session.autograd_reference(cts[:1])


# a tensor the program captures from outside (not a parameter): its .grad is the user's
_CAPTURED_SCALE = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)


class ReentrantCheckpointed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4, dtype=torch.float64)
        self.b = torch.nn.Linear(4, 4, dtype=torch.float64)

    def block(self, y):
        return self.b(self.a(y).tanh() * _CAPTURED_SCALE)

    def forward(self, x):
        checkpointed = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=True)
        return checkpointed.square().sum()


def test_the_autograd_reference_of_a_reentrant_checkpoint_is_eagers_and_touches_nothing():
    """A reentrant checkpoint refuses `autograd.grad` and runs its block again in the
    backward: the reference takes `backward()`'s gradients with the module still holding the
    copies, so the user's parameters, input and captured tensor keep their `.grad`."""
    torch.manual_seed(0)
    model = ReentrantCheckpointed()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    # eager without the checkpoint, on a copy: what every gradient must be
    twin = copy.deepcopy(model)
    x_twin = x.detach().clone().requires_grad_()
    names = [n for n, _ in twin.named_parameters()]
    loss = twin.block(x_twin).square().sum()
    want = torch.autograd.grad(loss, [x_twin, *twin.parameters()])
    _CAPTURED_SCALE.grad = torch.full((), 7.0, dtype=torch.float64)
    captured_grad = _CAPTURED_SCALE.grad
    try:
        session = Session(model, x)
        ref = session.autograd_reference()
        got = [ref["x"], *(ref[n.replace(".", "_")] for n in names)]
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=1e-12)
        assert all(c.allclose for c in session.compare_with_autograd())
        assert x.grad is None and all(p.grad is None for p in model.parameters())
        assert _CAPTURED_SCALE.grad is captured_grad and captured_grad.item() == 7.0
    finally:
        _CAPTURED_SCALE.grad = None
