"""thunderviz.widgets.show: one entry point for programs, sessions, jit functions, documents
and .tvz files."""

from __future__ import annotations

import pytest
import torch

import thunderviz
from tests.widgets.models import BlockMLP, mlp_inputs
from thunderviz.debug import Session
from thunderviz.viz import load, save
from thunderviz.widgets import DebuggerWidget, show


def test_a_module_and_its_inputs_give_a_live_debugger(mlp):
    model, x, target = mlp
    w = show(model, x, target)
    assert isinstance(w, DebuggerWidget) and w.live
    assert set(w.document["traces"]) == {"forward", "augmented_forward", "backward"}
    assert len(w.document["steps"]) == len(w.session.result.backward.bound_symbols)  # recorded
    assert w.document["grad_flow"]
    assert w.session.fn is model


def test_a_function_with_keyword_inputs():
    def f(a, b, *, scale):
        return (torch.sin(a) * b * scale).sum()

    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    w = show(f, a, b, scale=2.0, tab="backward")
    assert w.tab == "backward" and w.live
    w.stepper.break_on_nan(False)
    w.continue_()
    ga, gb = torch.autograd.grad(f(a, b, scale=2.0), (a, b))
    torch.testing.assert_close(w.grads["a"], ga)
    torch.testing.assert_close(w.grads["b"], gb)


def test_session_options_reach_the_session(mlp):
    model, x, target = mlp
    fake = show(model, x, target, fake=True)
    assert not fake.live and set(fake.document["traces"]) == {"forward"}
    forward_only = show(model, x, target, backward=False, depth=2)
    assert forward_only.session.depth == 2 and forward_only.session.result is None
    assert not forward_only.live


def test_a_session_or_a_widget_is_shown_as_is(mlp_session):
    w = show(mlp_session, record=False)
    assert w.session is mlp_session
    assert show(w) is w
    with pytest.raises(TypeError, match="takes no inputs"):
        show(mlp_session, torch.randn(2))


def test_a_jit_function_shows_its_last_traces(mlp):
    model, x, target = mlp
    jitted = thunderviz.jit(model)
    with pytest.raises(ValueError, match="not been called yet"):
        show(jitted)
    jitted(x, target).backward()
    w = show(jitted)
    assert not w.live
    assert set(w.document["traces"]) == {"forward", "augmented_forward", "backward"}
    fwd = thunderviz.last_traces(jitted)[0]
    assert len([o for o in w.document["traces"]["forward"]["ops"] if o["parent"] is None]) == len(
        fwd.bound_symbols
    )
    traced_again = show(jitted, x, target)  # with inputs: a Session, so it can step
    assert traced_again.live and traced_again.session.fn is model


def test_documents_and_tvz_files_are_static(tmp_path, mlp_session):
    doc = mlp_session.document()
    w = show(doc)
    assert not w.live and w.document == doc
    path = save(mlp_session, tmp_path / "mlp.tvz")
    from_file = show(path)
    assert not from_file.live and from_file.document == load(path)
    assert show(str(path)).document == from_file.document
    with pytest.raises(FileNotFoundError, match="no such .tvz"):
        show(tmp_path / "missing.tvz")
    with pytest.raises(TypeError, match="takes no inputs"):
        show(doc, torch.randn(2))
    with pytest.raises(ValueError, match="live=True"):
        show(doc, live=True)


def test_traces_and_results_are_views(mlp):
    model, x, target = mlp
    tr = thunderviz.trace(model, x, target)
    assert set(show(tr).document["traces"]) == {"forward"}
    result = thunderviz.autodiff(tr)
    assert "backward" in show(result).document["traces"]


def test_what_cannot_be_shown_says_so():
    with pytest.raises(TypeError, match="cannot show a int"):
        show(3)


def test_the_module_changes_nothing_in_the_model():
    model, x, target = mlp_inputs()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    w = show(model, x, target)
    w.continue_()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert isinstance(w.session, Session) and isinstance(model, BlockMLP)
