"""Session.intervene against torch.autograd with the equivalent hooks (float64, eager).

A module target equals a full backward hook (`register_full_backward_hook`) that edits
`grad_input`; a forward op equals a tensor hook on its output; a forward argument equals a
hook on the leaf. The references below are plain PyTorch, written apart from thunderviz.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from tests.helpers import autograd_reference
from thunderviz.models import GPT, GPTConfig


def _clip(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    # what clip_grad_norm_ does to one tensor
    return g * min(1.0, max_norm / (float(g.norm()) + 1e-6))


EDITS = [
    ("zero", torch.zeros_like),
    (("scale", 3.0), lambda g: 3.0 * g),
    (("clip", 0.01), lambda g: _clip(g, 0.01)),
    (("clamp", -1e-3, 2e-3), lambda g: g.clamp(-1e-3, 2e-3)),
]


def _eager_module_hook(
    model: nn.Module, args: tuple, path: str | None, fn
) -> dict[str, torch.Tensor]:
    m = copy.deepcopy(model)
    if path is not None:
        m.get_submodule(path).register_full_backward_hook(
            lambda mod, grad_input, grad_output: tuple(
                None if g is None else fn(g) for g in grad_input
            )
        )
    return autograd_reference(m, *args)[1]


def _assert_same(ours: dict, reference: dict) -> None:
    for name, ref in reference.items():
        if ref is None:
            assert ours[name] is None or not torch.any(ours[name] != 0), name
        else:
            torch.testing.assert_close(
                ours[name], ref, rtol=1e-10, atol=1e-13, msg=lambda m, n=name: f"{n}: {m}"
            )


@pytest.fixture(scope="module")
def gpt_session():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=8, n_layer=2, n_head=2, d_model=16)).double()
    idx = torch.randint(0, 40, (2, 8))
    return model, (idx, idx), tv.Session(model, idx, idx)


@pytest.mark.parametrize("spec,fn", EDITS, ids=["zero", "scale", "clip", "clamp"])
@pytest.mark.parametrize("path", ["blocks.0.mlp", "blocks.1", "blocks.0.attn"])
def test_module_intervention_equals_full_backward_hook(gpt_session, path, spec, fn):
    model, args, s = gpt_session
    s.clear_interventions()
    iv = s.intervene(path, spec)
    assert iv.kind == "module" and s.interventions == [iv]
    _assert_same(s.grads(), _eager_module_hook(model, args, path, fn))
    s.clear_interventions()
    _assert_same(s.grads(), _eager_module_hook(model, args, None, None))


def test_zeroing_mlp_changes_what_its_hook_would_and_nothing_upstream_of_it(gpt_session):
    model, args, s = gpt_session
    s.clear_interventions()
    before = s.grads()
    s.intervene("module:blocks.0.mlp", "zero")
    after = s.grads()
    # the mlp's own weights still get their gradient (a full backward hook edits grad_input)
    torch.testing.assert_close(after["blocks_0_mlp_0_weight"], before["blocks_0_mlp_0_weight"])
    assert not torch.equal(after["blocks_0_ln_2_weight"], before["blocks_0_ln_2_weight"])
    s.clear_interventions()


def _program(x, w1, w2, hooks=None):
    # `h * h + h` and `yy + y` give several tensors one shared backward value
    hooks = hooks or {}
    h = torch.tanh(x @ w1)
    if "h" in hooks:
        h.register_hook(hooks["h"])
    s = h * h + h
    if "s" in hooks:
        s.register_hook(hooks["s"])
    y = s @ w2
    yy = y * y
    if "yy" in hooks:
        yy.register_hook(hooks["yy"])
    if "w1" in hooks:
        w1.register_hook(hooks["w1"])
    return (yy + y).sum()


@pytest.fixture(scope="module")
def program_session():
    gen = torch.Generator().manual_seed(3)
    values = [
        torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
        for shape in ((3, 4), (4, 5), (5, 2))
    ]
    return values, tv.Session(_program, *values)


def _eager_tensor_hooks(values, hooks):
    leaves = [v.detach().clone().requires_grad_() for v in values]
    _program(*leaves, hooks=hooks).backward()
    return dict(zip(["x", "w1", "w2"], [v.grad for v in leaves], strict=True))


def _op(session, op_id: str, k: int = 0):
    return [b for b in session.forward.bound_symbols if b.sym.id == op_id][k]


@pytest.mark.parametrize("spec,fn", EDITS, ids=["zero", "scale", "clip", "clamp"])
@pytest.mark.parametrize(
    "hook,op_id,k",
    [("h", "torch.tanh", 0), ("s", "torch.Tensor.add", 0), ("yy", "torch.Tensor.mul", 1)],
)
def test_forward_op_intervention_equals_tensor_hook(program_session, hook, op_id, k, spec, fn):
    values, s = program_session
    s.clear_interventions()
    iv = s.intervene(_op(s, op_id, k), spec)
    assert iv.kind == "gradient"
    _assert_same(s.grads(), _eager_tensor_hooks(values, {hook: fn}))
    s.clear_interventions()


def test_interventions_compose_in_order_and_clear(program_session):
    values, s = program_session
    s.clear_interventions()
    tanh = _op(s, "torch.tanh")
    s.intervene(tanh, ("scale", 2.0))
    s.intervene(_op(s, "torch.Tensor.mul", 1), ("scale", 0.5))
    s.intervene(tanh, ("clamp", -1.0, 1.0))
    s.intervene("w1", lambda g: g + 1.0)  # a forward argument: its final gradient
    assert [iv.edit.describe() for iv in s.interventions] == [
        "scale(2)",
        "scale(0.5)",
        "clamp(-1, 1)",
        "<lambda>",
    ]
    expected = _eager_tensor_hooks(
        values,
        {
            "h": lambda g: (2.0 * g).clamp(-1.0, 1.0),
            "yy": lambda g: 0.5 * g,
            "w1": lambda g: g + 1.0,
        },
    )
    _assert_same(s.grads(), expected)
    s.stepper.finish()  # the interactive stepper runs with the same edits
    _assert_same(s.stepper.grads, expected)
    s.clear_interventions()
    assert s.interventions == []
    _assert_same(s.grads(), _eager_tensor_hooks(values, {}))
    _assert_same(s.stepper.grads, _eager_tensor_hooks(values, {}))


def test_backward_op_target_edits_its_output_for_every_reader():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1)).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    s = tv.Session(model, x, cotangents=torch.ones(5, 1, dtype=torch.float64))
    relu_backward = [
        b
        for b in s.backward.bound_symbols
        if b.fwd_bsym is not None and b.fwd_bsym.module_path == "1"
    ]
    assert len(relu_backward) == 1
    s.intervene(relu_backward[0], ("scale", -0.5))
    # the relu's backward output is what nn.ReLU's full backward hook sees as grad_input
    _assert_same(s.grads(), _eager_module_hook(model, (x,), "1", lambda g: -0.5 * g))
    assert s.interventions[0].op.startswith("backward:")


def test_noise_is_seeded_and_leaves_the_global_rng_alone(program_session):
    values, s = program_session
    s.clear_interventions()
    state = torch.random.get_rng_state()
    s.intervene(_op(s, "torch.tanh"), ("noise", 0.1), seed=7)
    first = s.grads()
    s.clear_interventions()
    s.intervene(_op(s, "torch.tanh"), ("noise", 0.1), seed=7)
    again = s.grads()
    assert torch.equal(torch.random.get_rng_state(), state)
    _assert_same(first, again)

    def noisy(g):
        gen = torch.Generator().manual_seed(7)
        return g + 0.1 * torch.randn(g.shape, generator=gen, dtype=torch.float64)

    _assert_same(first, _eager_tensor_hooks(values, {"h": noisy}))
    s.clear_interventions()


def test_recorded_steps_grad_flow_and_document_follow_the_intervention():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    s = tv.Session(model, x, cotangents=torch.ones(5, 3, dtype=torch.float64))
    s.record_backward()
    steps_before = len(s.steps)
    assert s.grad_flow()["_0_weight"]["status"] == "ok"
    iv = s.intervene("1", "zero")  # nn.Tanh: nothing reaches the first linear any more
    assert len(s.steps) == steps_before
    flow = s.grad_flow()
    assert flow["_0_weight"]["status"] == "zero" and flow["_2_weight"]["status"] == "ok"
    finished = {n: st for step in s.steps for n, st in step.grads.items()}
    assert finished["_0_weight"].all_zero and finished["_0_bias"].all_zero
    assert not finished["_2_weight"].all_zero
    assert not torch.any(s.grads()["_0_weight"] != 0)
    doc = s.document()
    assert doc["interventions"] == [iv.to_json()]
    assert doc["interventions"][0]["edit"] == {"kind": "zero", "params": []}


def test_bad_targets_and_edits_are_refused(program_session):
    _, s = program_session
    with pytest.raises(ValueError, match="no op id, module path or tensor name"):
        s.intervene("no_such_thing", "zero")
    with pytest.raises(ValueError, match="unknown edit"):
        s.intervene("w1", "halve")
    with pytest.raises(ValueError, match="takes 2 number"):
        s.intervene("w1", ("clamp", 1.0))
    with pytest.raises(IndexError):
        s.intervene("backward:100000", "zero")
    for bad in ("backward:x", "forward:1.0", "backward:-1"):  # top-level op ids only
        with pytest.raises(ValueError, match="not an op id"):
            s.intervene(bad, "zero")
    assert s.interventions == []


def test_interventions_and_the_nan_ledger_are_saved_in_tvz(program_session, tmp_path):
    values, _ = program_session
    s = tv.Session(_program, *values)
    s.record_backward()
    iv = s.intervene(_op(s, "torch.tanh"), ("noise", 0.5), seed=3)
    s.intervene("w1", "zero")
    doc = tv.load(tv.save(s, tmp_path / "edited.tvz"))
    assert doc["interventions"] == [iv.to_json(), s.interventions[1].to_json()]
    assert doc["interventions"][0]["edit"] == {"kind": "noise", "params": [0.5], "seed": 3}
    assert doc["nan_ledger"] == []  # every step is clean
    assert doc["grad_flow"]["w1"]["status"] == "zero"


def test_the_widget_intervenes_on_a_browser_message_and_redraws():
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1)).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    s = tv.Session(model, x, cotangents=torch.ones(5, 1, dtype=torch.float64))
    w = tv.DebuggerWidget(s)
    w._handle_message(w, {"type": "step", "action": "continue"}, [])
    assert w.document["grad_flow"]["_0_weight"]["status"] == "ok"
    w._handle_message(w, {"type": "intervene", "target": "module:1", "edit": "zero"}, [])
    assert w.last_error is None
    assert [iv.target for iv in s.interventions] == ["module 1"]
    assert w.document["interventions"] == [s.interventions[0].to_json()]
    assert w.document["grad_flow"]["_0_weight"]["status"] == "zero"
    _assert_same(s.grads(), _eager_module_hook(model, (x,), "1", torch.zeros_like))
    finished = {n for st in w.steps for n in st["grads"]}
    assert "_0_weight" in finished  # the stepper re-ran: the steps the browser shows are new
    w._handle_message(w, {"type": "intervene", "target": "module:1", "edit": ["scale", "x"]}, [])
    assert isinstance(w.last_error, ValueError) and len(s.interventions) == 1
    w._handle_message(w, {"type": "clear_interventions"}, [])
    assert s.interventions == [] and "interventions" not in w.document
    assert w.document["grad_flow"]["_0_weight"]["status"] == "ok"
