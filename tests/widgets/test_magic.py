"""%thunder / %%thunder: the call is parsed with ast and its parts evaluated in the user's
namespace; options are argparse with clear usage errors."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from tests.widgets.models import mlp_inputs
from thunderviz.widgets import DebuggerWidget
from thunderviz.widgets.magic import parse_call, parse_options, split_cell, split_options


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("thunderviz.widgets")
    model, x, target = mlp_inputs()
    shell.user_ns.update(model=model, x=x, target=target, calls=[])
    return shell


def test_load_ext_registers_both_magics(ip):
    assert ip.find_line_magic("thunder") is not None
    assert ip.find_cell_magic("thunder") is not None


def test_line_magic_traces_the_call_and_returns_the_debugger(ip):
    w = ip.run_line_magic("thunder", "model(x, target)")
    assert isinstance(w, DebuggerWidget) and w.live
    assert w.session.fn is ip.user_ns["model"]
    assert w.session.args[0] is ip.user_ns["x"] and w.session.args[1] is ip.user_ns["target"]
    assert set(w.document["traces"]) == {"forward", "augmented_forward", "backward"}


def test_options_come_before_the_call(ip):
    w = ip.run_line_magic("thunder", "--depth 2 --no-backward --tab forward model(x, target)")
    assert w.session.depth == 2 and w.session.result is None and w.tab == "forward"
    w = ip.run_line_magic("thunder", "--fake model(x, target)")
    assert w.session.fake and not w.live


def test_arguments_are_expressions_in_the_user_namespace(ip):
    ip.user_ns["inputs"] = (ip.user_ns["x"],)
    ip.user_ns["kw"] = {"target": ip.user_ns["target"]}
    w = ip.run_line_magic("thunder", "model(*inputs, **kw)")
    assert w.session.args == (ip.user_ns["x"],)
    assert w.session.kwargs["target"] is ip.user_ns["target"]
    w = ip.run_line_magic("thunder", "model(x[:3] * 2, target=target[:3])")
    assert tuple(w.session.args[0].shape) == (3, 8)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "needs a call"),
        ("model", "expects one call"),
        ("model(x) + 1", "expects one call"),
        ("model(x, target); calls.append(1)", "cannot parse"),
        ("model(x, target) if True else calls.append(1)", "expects one call"),
        ("import os", "cannot parse"),
        ("--depth model(x)", "--depth takes a whole number"),
        ("--depth -1 model(x)", "--depth must be 0 or more"),
        ("--bogus model(x)", "unrecognized arguments"),
    ],
)
def test_bad_lines_are_usage_errors_and_run_nothing(ip, line, message):
    with pytest.raises(UsageError, match=message) as err:
        ip.run_line_magic("thunder", line)
    assert "usage: %thunder" in str(err.value) or "needs a call" in str(err.value)
    assert ip.user_ns["calls"] == []  # nothing of the line ran


def test_a_callee_that_is_not_callable(ip):
    ip.user_ns["not_callable"] = 3
    with pytest.raises(UsageError, match="not_callable is a int"):
        ip.run_line_magic("thunder", "not_callable(x)")


def test_cell_magic_runs_the_setup_then_debugs_the_last_call(ip):
    w = ip.run_cell_magic("thunder", "--depth 0", "y = x * 2\nt2 = target\nmodel(y, t2)\n")
    assert ip.user_ns["y"] is w.session.args[0]
    assert w.session.depth == 0 and w.live
    w = ip.run_cell_magic("thunder", "", "model(x, target)")
    assert w.session.args[0] is ip.user_ns["x"]


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("y = model(x, target)", "last line must be the call"),
        ("model(x, target)\nz = 1", "last line must be the call"),
        ("def f(:\n", "does not parse"),
        ("# only a comment\n", "cell is empty"),
    ],
)
def test_bad_cells_are_usage_errors(ip, cell, message):
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("thunder", "", cell)


def test_cell_magic_options_are_checked(ip):
    with pytest.raises(UsageError, match="--depth takes a whole number"):
        ip.run_cell_magic("thunder", "--depth two", "model(x, target)")


def test_help_prints_the_options(ip, capsys):
    assert ip.run_line_magic("thunder", "--help") is None
    out = capsys.readouterr().out
    assert "--no-backward" in out and "--depth" in out and "--fake" in out


def test_the_parsers():
    call = parse_call(" f(a, *b, k=c, **d) ")
    assert call.source == "f(a, *b, k=c, **d)"
    fn, args, kwargs = call.evaluate({"f": len, "a": 1, "b": [2, 3], "c": 4, "d": {"e": 5}})
    assert fn is len and args == [1, 2, 3] and kwargs == {"k": 4, "e": 5}
    assert split_options("--depth 2 --fake model(x, y)") == (
        ["--depth", "2", "--fake"],
        "model(x, y)",
    )
    assert split_options("model(-x)") == ([], "model(-x)")
    options = parse_options(["--no-backward"])
    assert options.backward is False and options.depth == 1 and not options.fake
    setup, call = split_cell("a = 1\nb = 2\nf(a, b)")
    assert len(setup.body) == 2 and call.source == "f(a, b)"
