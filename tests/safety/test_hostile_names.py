"""User text never becomes code: hostile module paths, parameter names, file names and source
lines go through core/quoting on their way into generated Python.

The reference for "safe" is Python itself: the printed trace must compile, have exactly the
lines the printer made (no hidden line breaks), compute what eager computes, and never
create the canary file a pasted statement would create."""

from __future__ import annotations

import ast
import copy
import io
import tokenize

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thunderviz as tv
from tests.safety.hostile import LINE_BREAKS, Holder, exploit, function_from, payload
from thunderviz.core.quoting import UnsafeCodeError, code_line, comment, identifier, is_identifier
from thunderviz.core.trace import Provenance


def _check_trace(model: torch.nn.Module, x: torch.Tensor) -> tv.Trace:
    """Trace, compile and run: same value as eager; printed text is one line per line."""
    trace = tv.trace(model, x)
    assert len(trace.python().splitlines()) == len(trace.printed_lines())
    ast.parse(trace.python())
    got = trace.python_callable()(x, *model.parameters(), *model.buffers())
    torch.testing.assert_close(got, model(x))
    return trace


# --- the exploits, through every door that compiles a trace ------------------------
@pytest.mark.parametrize("sep", LINE_BREAKS, ids=[ascii(s) for s in LINE_BREAKS])
def test_module_name_with_line_break_never_runs(sep, tmp_path):
    canary = tmp_path / "canary"
    torch.manual_seed(0)
    model = Holder(key=exploit(sep, canary))
    x = torch.randn(2, 3)
    _check_trace(model, x)

    jm = tv.jit(copy.deepcopy(model))
    jm(x).backward()
    expected = copy.deepcopy(model)
    expected(x).backward()
    for (name, p), (_, q) in zip(jm.named_parameters(), expected.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=name)

    comparisons = tv.Session(model, x).compare_with_autograd()
    assert comparisons and all(c.allclose for c in comparisons)
    assert not canary.exists()


@pytest.mark.parametrize("sep", ["\n", "\r", "\u2028", "\x0c"], ids=ascii)
def test_file_name_and_source_line_with_line_break_never_run(sep, tmp_path):
    canary = tmp_path / "canary"
    fn = function_from(
        f"cell{sep}{payload(canary)}{sep}#.py", f"return torch.sin(y){sep}{payload(canary)}{sep}"
    )
    model = Holder(fn=fn)
    x = torch.randn(2, 3)
    trace = _check_trace(model, x)
    assert any("\\" in line.text for line in trace.printed_lines()), (
        "the line break is shown escaped"
    )
    comparisons = tv.Session(model, x).compare_with_autograd()
    assert comparisons and all(c.allclose for c in comparisons)
    assert not canary.exists()


def test_parameter_names_equal_after_nfkc_stay_distinct():
    # Python reads `ﬁ` as `fi`: printed as-is, two parameters would be one variable.
    model = Holder(param_name="ﬁ", extra="fi")
    x = torch.randn(2, 3)
    trace = _check_trace(model, x)
    names = [p.name for p in trace.args[1:]]
    assert len(set(names)) == 2 and all(is_identifier(n) for n in names)


@pytest.mark.parametrize("name", ["w²", "w½", "٣x", "if", "None", "_op_aten_mm_default", "\u0301a"])
def test_parameter_names_that_are_not_python_identifiers(name):
    model = Holder(param_name=name)
    x = torch.randn(2, 3)
    trace = _check_trace(model, x)
    assert all(is_identifier(p.name) for p in trace.args)


def test_hostile_keyword_argument_is_passed_quoted():
    def fn(x):
        return torch.nn.functional.linear(x, **{"weight": torch.eye(3)}).sum()

    x = torch.randn(2, 3)
    trace = tv.trace(fn, x)
    assert "weight=" in trace.python()
    torch.testing.assert_close(trace.python_callable()(x), fn(x))


# --- the quoting functions against Python's own reader ------------------------------------
_any_text = st.text(st.characters(blacklist_categories=()), max_size=30)


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


@settings(max_examples=200, deadline=None)
@given(_any_text)
def test_comment_is_one_comment_token(text):
    line = comment(text)
    assert len(line.splitlines()) == 1
    source = f"a = 1  {line}\nb = 2\n"
    kinds = [t.type for t in _tokens(source) if t.type == tokenize.COMMENT]
    assert kinds == [tokenize.COMMENT]
    assert [type(s) for s in ast.parse(source.encode("utf-8")).body] == [ast.Assign, ast.Assign]


@settings(max_examples=200, deadline=None)
@given(_any_text)
def test_identifier_is_what_python_reads(text):
    name = identifier(text)
    assert is_identifier(name)
    # Python's parser (the reference) reads the same name back: NFKC-stable, not a keyword.
    target = ast.parse(f"{name} = 1").body[0].targets[0]
    assert target.id == name


@pytest.mark.parametrize("text", ["a\nb", "a\rb", "a\u2028b", "a\x00b", "a\ud800b"], ids=ascii)
def test_code_line_refuses_multi_line_statements(text):
    with pytest.raises(UnsafeCodeError):
        code_line(text)


# --- the property: random Unicode through every name, nothing ever runs -------------------
_name_text = st.text(st.characters(blacklist_categories=(), blacklist_characters="."), max_size=12)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    where=st.sampled_from(["module", "parameter", "file", "source"]),
    before=_name_text,
    after=_name_text,
    sep=st.sampled_from(LINE_BREAKS + ["", "\u202e", "\x00"]),
)
def test_random_unicode_names_compile_and_never_run(tmp_path, where, before, after, sep):
    canary = tmp_path / "canary"
    text = f"{before}{sep}  {payload(canary)}{sep}{after}"
    if where == "module":
        model = Holder(key=text)
    elif where == "parameter":
        model = Holder(param_name=text)
    elif where == "file":
        model = Holder(fn=function_from(text, "return torch.sin(y)"))
    else:
        model = Holder(fn=function_from(f"<hostile {len(text)}>", text))
    _check_trace(model, torch.randn(2, 3))
    assert not canary.exists()


def test_provenance_and_headers_stay_comments(tmp_path):
    """A pass's name (a user's Transform) and a bound symbol's header are printed as comments."""
    canary = tmp_path / "canary"
    model = Holder()
    x = torch.randn(2, 3)
    trace = tv.trace(model, x)
    evil = f"my pass\n{payload(canary)}\r\u2028{payload(canary)}"
    trace.provenance.append(Provenance(evil, None, evil))
    trace.bound_symbols[0].header = evil
    assert len(trace.python().splitlines()) == len(trace.printed_lines())
    torch.testing.assert_close(trace.python_callable()(x, *model.parameters()), model(x))
    assert not canary.exists()
