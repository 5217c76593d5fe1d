"""DebuggerWidget: traits under the viewer's names, selection mapped to real objects, the
stepper driven from Python and from browser messages, and the static fallback outputs."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers import autograd_reference
from tests.widgets.models import BlockMLP, mlp_inputs
from thunderviz.debug import Session
from thunderviz.widgets import esm as esm_module
from thunderviz.widgets import twin as twin_module
from thunderviz.widgets.esm import TWIN_MARK
from thunderviz.widgets.widget import (
    VIEW_MIME,
    WIDGET_MIME,
    DebuggerWidget,
    ViewerNotBuilt,
    viewer_bundle,
)

VIEWER_TRAITS = {
    "document",
    "selected",
    "highlight",
    "current_step",
    "steps",
    "tab",
    "expanded",
    "live",
}


def fresh_widget(**options):
    model, x, target = mlp_inputs()
    return DebuggerWidget(Session(model, x, target), **options), model, x, target


class Sent:
    """Records what the widget sends to the front end."""

    def __init__(self, w):
        self.messages = []
        w._send = lambda msg, buffers=None: self.messages.append(msg)

    def of(self, method):
        return [m for m in self.messages if m.get("method") == method]

    def custom(self):
        return [m["content"] for m in self.of("custom")]


def test_a_missing_bundle_says_to_run_make_frontend(monkeypatch, tmp_path, mlp_session):
    monkeypatch.setattr(esm_module, "BUNDLE_PATH", tmp_path / "viewer.js")
    monkeypatch.setattr(esm_module, "_bundle_cache", {})
    with pytest.raises(ViewerNotBuilt, match="make frontend"):
        DebuggerWidget(mlp_session.document())


def test_the_module_is_the_built_viewer(mlp_session):
    w = DebuggerWidget(mlp_session.document())
    esm = w.get_state()["_esm"]
    assert json.dumps(viewer_bundle()) in esm  # the bundle, imported from a blob: URL
    assert "export default { render }" in esm and "export function render" in esm
    assert "import(URL.createObjectURL" in esm


def test_traits_travel_under_the_viewer_names(mlp_session):
    w = DebuggerWidget(mlp_session)
    state = w.get_state()
    assert VIEWER_TRAITS <= set(state)
    assert "selected_id" not in state and "highlight_ids" not in state
    assert state["live"] is True and state["current_step"] == -1
    assert state["document"]["format"] == "thunderviz"
    assert w.get_state("selected") == {"selected": ""}
    assert w.get_state(["selected", "tab"]) == {"selected": "", "tab": ""}


def test_browser_selection_maps_to_the_real_objects(mlp, mlp_session):
    model = mlp[0]
    w = DebuggerWidget(mlp_session)
    s = mlp_session
    cases = {
        "forward:0": s.forward.bound_symbols[0],
        "forward:0.1": s.forward.bound_symbols[0].subsymbols[1],
        "augmented_forward:1": s.result.augmented_forward.bound_symbols[1],
        "backward:3": s.result.backward.bound_symbols[3],
        "module:block": model.block,
        "module:block.0": model.block[0],
        "module:": model,
    }
    for ident, expected in cases.items():
        w.set_state({"selected": ident})  # what a click in the browser does
        assert w.selected_id == ident
        assert w.selected is expected, ident
    out = s.forward.bound_symbols[0].output
    w.set_state({"selected": out.name})
    assert w.selected is out or w.selected.name == out.name
    w.set_state({"selected": ""})
    assert w.selected is None
    w.set_state({"selected": "forward:999"})
    assert w.selected is None


def test_select_and_highlight_from_python(mlp, mlp_session):
    model = mlp[0]
    w = DebuggerWidget(mlp_session)
    sent = Sent(w)
    bsym = mlp_session.result.backward.bound_symbols[4]
    w.select(bsym)
    assert w.selected_id == "backward:4" and w.selected is bsym
    assert sent.of("update")[-1]["state"] == {"selected": "backward:4"}
    w.select(model.head)
    assert w.selected_id == "module:head"
    w.selected = mlp_session.forward.bound_symbols[1].output  # a Proxy
    assert w.selected_id == mlp_session.forward.bound_symbols[1].output.name
    w.select(None)
    assert w.selected_id == ""
    w.highlight = [mlp_session.forward.bound_symbols[0], ["backward:2", model.block], None]
    assert w.highlight == ["forward:0", "backward:2", "module:block"]
    assert sent.of("update")[-1]["state"] == {"highlight": w.highlight}
    w.highlight = []
    assert w.highlight == []
    with pytest.raises(ValueError, match="not an op id"):
        w.select("no such thing")
    other = Session(*mlp_inputs(1))
    with pytest.raises(ValueError, match="not in this session"):
        w.select(other.forward.bound_symbols[0])
    with pytest.raises(ValueError, match="not a module"):
        w.select(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError):
        w.select(3.5)


def test_a_change_from_the_browser_is_echoed_not_sent_back(mlp_session):
    w = DebuggerWidget(mlp_session)
    sent = Sent(w)
    w.set_state({"selected": "forward:1", "expanded": ["block"]})
    assert w.selected_id == "forward:1" and w.expanded == ["block"]
    echoes = sent.of("echo_update")
    assert echoes and echoes[0]["state"] == {"selected": "forward:1", "expanded": ["block"]}
    assert not sent.of("update")


def test_an_id_goes_back_to_the_browser_as_it_came(mlp_session):
    w = DebuggerWidget(mlp_session)
    sent = Sent(w)
    w.set_state({"selected": "forward:999", "highlight": ["backward:1", "not_a_tensor"]})
    assert w.selected is None and w.selected_id == "forward:999"
    assert w.get_state(["selected", "highlight"]) == {
        "selected": "forward:999",
        "highlight": ["backward:1", "not_a_tensor"],
    }
    assert not sent.of("update")  # what the browser sent is not sent back
    w.select(None)  # `selected` stays None, yet the browser must hear that the id is gone
    assert w.selected_id == "" and sent.of("update")[-1]["state"] == {"selected": ""}
    with pytest.raises(ValueError, match="not an op id"):
        w.highlight = ["not_a_tensor"]  # from Python an id must name something


def test_stepping_from_python_drives_the_stepper_and_pushes_steps():
    w, *_ = fresh_widget()
    n = len(w.session.result.backward.bound_symbols)
    records = [w.step() for _ in range(3)]
    assert [r.index for r in records] == [0, 1, 2]
    assert w.stepper.index == 3 and w.current_step == 2
    assert len(w.steps) == n
    assert [s["op"] for s in w.steps[:4]] == [
        "backward:0",
        "backward:1",
        "backward:2",
        "backward:3",
    ]
    assert w.steps[2]["outputs"], "an executed step carries its statistics"
    assert w.steps[2] == {
        **records[2].to_json(),
        **({"note": w.steps[2]["note"]} if "note" in w.steps[2] else {}),
    }
    assert w.steps[3]["outputs"] == {} and w.steps[3]["grads"] == {}  # not run yet
    name = next(iter(records[2].outputs))
    assert torch.is_tensor(w.value(name))
    w.back()
    assert w.current_step == 1 and w.stepper.index == 2
    w.reset()
    assert w.current_step == -1 and w.stepper.index == 0 and len(w.steps) == n


def test_messages_from_the_browser_step_the_backward():
    w, *_ = fresh_widget()
    sent = Sent(w)
    for _ in range(3):
        w._handle_message(w, {"type": "step", "action": "step"}, [])
    assert w.current_step == 2 and w.stepper.index == 3
    w._handle_message(w, {"type": "step", "action": "back"}, [])
    assert w.current_step == 1
    # run to a forward op: the first backward step its grad rule produced
    w._handle_message(w, {"type": "step", "action": "reset"}, [])
    w._handle_message(w, {"type": "step", "action": "run_to", "target": "forward:0"}, [])
    last = w.history[-1]
    assert last.bsym.fwd_bsym is w.session.forward.bound_symbols[0]
    assert w.steps[w.current_step]["note"] == "reached target"
    # run to a module
    w._handle_message(w, {"type": "step", "action": "reset"}, [])
    w._handle_message(w, {"type": "step", "action": "run_to", "target": "module:head"}, [])
    assert w.history[-1].module_path == "head"
    assert "reached module head" in w.steps[w.current_step]["note"]
    # breakpoints from the viewer's panel
    w._handle_message(
        w,
        {
            "type": "breakpoints",
            "breakpoints": {
                "ops": ["backward:5", "t0_not_a_thing"],
                "modules": ["block"],
                "nan_inf": False,
                "grad_norm_above": 100.0,
            },
        },
        [],
    )
    assert w.stepper.breakpoints == {
        "ops": ["backward:5"],
        "modules": ["block"],
        "nan_inf": False,
        "grad_norm_above": 100.0,
    }
    assert any("breakpoints ignored" in m.get("text", "") for m in sent.custom())
    # bad messages become errors in the viewer, not exceptions in the kernel
    w._handle_message(w, {"type": "step", "action": "explode"}, [])
    w._handle_message(w, {"type": "step", "action": "run_to", "target": ""}, [])
    errors = [m for m in sent.custom() if m["type"] == "error"]
    assert len(errors) == 2 and "explode" in errors[0]["text"]
    assert isinstance(w.last_error, ValueError)


def test_the_viewers_breakpoints_reach_the_stepper_as_its_json_form():
    w, *_ = fresh_widget()
    s = w.session
    produced = s.result.backward.bound_symbols[6].flat_proxy_outs[0].name
    aug = s.result.augmented_forward.bound_symbols[1]
    fwd_index = next(i for i, b in enumerate(s.forward.bound_symbols) if b is aug.fwd_bsym)
    spec = {
        "ops": [produced, "augmented_forward:1", "module:head", 3.5],
        "modules": ["module:block"],
        "nan_inf": True,
        "grad_norm_above": float("inf"),  # not a finite number: off
    }
    ignored = w.set_breakpoints(spec)
    assert len(ignored) == 1 and ignored[0].startswith("3.5:")
    assert w.stepper.breakpoints == {
        "ops": ["backward:6", f"forward:{fwd_index}"],
        "modules": ["head", "block"],
        "nan_inf": True,
        "grad_norm_above": None,
    }


def test_run_to_takes_objects_tensors_and_augmented_ops():
    w, model, *_ = fresh_widget()
    s = w.session
    w.run_to(s.forward.bound_symbols[1])
    assert w.history[-1].bsym.fwd_bsym is s.forward.bound_symbols[1]
    w.reset()
    target = s.result.backward.bound_symbols[6]
    w.run_to(target)
    assert w.stepper.index == 7
    w.reset()
    w.run_to(model.block)
    assert w.history[-1].module_path.startswith("block")
    w.reset()
    w.run_to(target.flat_proxy_outs[0].name)  # a backward tensor: the op producing it
    assert w.stepper.index == 7


def test_the_final_gradients_match_torch_autograd():
    w, model, x, target = fresh_widget()
    while not w.stepper.done:
        w.continue_()
    _, reference = autograd_reference(model, x, target)
    grads = w.grads
    for name, ref in reference.items():
        torch.testing.assert_close(grads[name], ref, rtol=1.3e-6, atol=1e-5)
    assert w.current_step == len(w.steps) - 1
    assert w.steps[-1]["note"] == "end of backward"


def test_continue_stops_at_the_first_nan_by_default():
    class Dist(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(3, 3)

        def forward(self, x):
            h = self.proj(x)
            d = h[:, None, :] - h[None, :, :]
            return torch.sqrt((d**2).sum(-1)).mean()

    torch.manual_seed(0)
    w = DebuggerWidget(Session(Dist(), torch.randn(4, 3)))
    record = w.continue_()
    assert record.has_nan_or_inf and "NaN/Inf" in record.note
    assert "torch.sqrt" in record.source.code
    assert "NaN/Inf" in w.steps[w.current_step]["note"]


def test_a_non_scalar_output_steps_from_ones():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh())
    x = torch.randn(2, 3)
    with pytest.warns(UserWarning, match="non-scalar output"):
        w = DebuggerWidget(Session(model, x))
    assert w.cotangents_defaulted and w.document["steps"]
    w.stepper.break_on_nan(False)
    w.continue_()
    assert w.stepper.done
    model.zero_grad()
    model(x).sum().backward()  # what ones as cotangents mean
    torch.testing.assert_close(w.grads["_0_weight"], model[0].weight.grad)
    torch.testing.assert_close(w.grads["_0_bias"], model[0].bias.grad)


def test_the_output_carries_a_static_fallback(mlp_session):
    w = DebuggerWidget(mlp_session)
    data, _ = w._repr_mimebundle_()
    assert set(data) == {WIDGET_MIME, VIEW_MIME, "image/svg+xml", "text/plain"}
    assert data[WIDGET_MIME]["model_id"] == w.model_id
    assert data[VIEW_MIME] == w.document
    assert "<svg" in data["image/svg+xml"] and TWIN_MARK in data["image/svg+xml"]
    assert data["text/plain"].startswith("<thunderviz view: BlockMLP")
    static = w.static_bundle()
    assert WIDGET_MIME not in static and static[VIEW_MIME] == w.document
    live, _ = w.widget_bundle()
    assert set(live) == {WIDGET_MIME, "text/plain"}
    json.dumps(data[VIEW_MIME], allow_nan=False)  # strict JSON, as a notebook stores it


class _Kernel:
    kernel = object()


def test_in_a_kernel_the_static_twin_comes_first(monkeypatch, mlp_session):
    shown = []
    monkeypatch.setattr(
        twin_module, "display", lambda data, raw=False, metadata=None: shown.append(data)
    )
    w = DebuggerWidget(mlp_session)
    monkeypatch.setattr(twin_module, "get_ipython", lambda: _Kernel())
    w._ipython_display_()
    assert [set(d) for d in shown] == [
        {VIEW_MIME, "image/svg+xml", "text/plain"},
        {WIDGET_MIME, "text/plain"},
    ]
    shown.clear()
    w.static_twin = False
    w._ipython_display_()
    assert [set(d) for d in shown] == [{WIDGET_MIME, VIEW_MIME, "image/svg+xml", "text/plain"}]
    shown.clear()
    w.static_twin = True
    monkeypatch.setattr(twin_module, "get_ipython", lambda: None)  # plain Python / terminal
    w._ipython_display_()
    assert len(shown) == 1 and WIDGET_MIME in shown[0]


def test_a_document_widget_is_static(mlp_session):
    doc = mlp_session.document()
    w = DebuggerWidget(doc)
    assert w.live is False and w.session is None
    w.set_state({"selected": "forward:0"})
    assert w.selected["id"] == "forward:0"  # the document's own entry
    w.set_state({"selected": "module:block"})
    assert w.selected == "block"
    with pytest.raises(RuntimeError, match="cannot step"):
        w.step()
    with pytest.raises(ValueError, match="live=True"):
        DebuggerWidget(doc, live=True)
    with pytest.raises(TypeError, match="thunderviz.show"):
        DebuggerWidget(BlockMLP())


def test_options_reach_the_traits(mlp_session):
    w = DebuggerWidget(mlp_session, tab="backward", selected="forward:1", expanded=["block"])
    state = w.get_state()
    assert state["tab"] == "backward" and state["selected"] == "forward:1"
    assert state["expanded"] == ["block"]


def test_a_closed_widget_still_shows_its_picture(monkeypatch, mlp_session):
    shown = []
    monkeypatch.setattr(
        twin_module, "display", lambda data, raw=False, metadata=None: shown.append(data)
    )
    w = DebuggerWidget(mlp_session)
    w.close()
    w._ipython_display_()
    assert len(shown) == 1 and WIDGET_MIME not in shown[0] and VIEW_MIME in shown[0]
