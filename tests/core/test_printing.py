"""The shortcuts of the compiled twin give what the plain way gives: source comments escaped
in parts equal `quoting.comment` of the whole line, cached type strings equal `type_string()`,
each `del` sits where Python's tokenizer says the statement ends, the hand walk behind
bound symbols' flat arguments finds pytree's leaves, and the code-only lines that are compiled
are the printed lines without their comments, line for line."""

from __future__ import annotations

import collections
import io
import tokenize

import pytest
import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

import thunderviz as tv
from thunderviz.core import quoting
from thunderviz.core.codegen import bsym_statement, type_comment
from thunderviz.core.liveness import source_freeing_dead
from thunderviz.core.proxies import NumberProxy, Proxy, TensorProxy, leaves, map_proxies
from thunderviz.core.run_errors import run_attributed
from thunderviz.core.symbol import BoundSymbol, SourceLocation, Symbol
from thunderviz.core.trace import PrintedLine, source_comment

HOSTILE = [
    "x = y + 1",
    "x = f('a  # b')  # a comment\tafter a tab",
    "caf\u00e9 = \u2028 line separator, \u202e bidi override, \x00 nul, \n newline",
    "\ud800 lone surrogate, \u200b zero width, \x85 next line",
]


@pytest.mark.parametrize("code", HOSTILE)
@pytest.mark.parametrize("module_path", ["", "blocks.0.attn", "h.\u202e1", "a\nb"])
def test_a_source_comment_is_the_whole_line_quoted_as_one(code, module_path):
    src = SourceLocation(filename="/x/m\u00f6del\t.py", lineno=12, code=code)
    where = f"  [{module_path}]" if module_path else ""
    expected = quoting.comment(f"{src.short()}: \t{code}{where}")
    assert source_comment(src, module_path) == expected
    assert source_comment(src, module_path) == expected  # from the cache


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_a_type_comment_holds_each_proxys_type_string(device, dtype):
    proxies = [
        TensorProxy("t0", (2, 3), dtype, torch.device(device)),
        TensorProxy("t1", (), dtype, torch.device(device)),
        NumberProxy("n0", 3),
        TensorProxy("t2", (2, 3), dtype, torch.device(device)),
    ]
    expected = ", ".join(f'{p.name}: "{p.type_string()}"' for p in proxies)
    assert type_comment(proxies) == expected


def _split_by_tokenizer(line: str) -> tuple[str, str]:
    """(code, comment) of a one-statement line, as Python's tokenizer reads it."""
    tokens = list(tokenize.generate_tokens(io.StringIO(line.lstrip(" ")).readline))
    body = line.lstrip(" ")
    at = next((t.start[1] for t in tokens if t.type == tokenize.COMMENT), len(body))
    pad = line[: len(line) - len(body)]
    return pad + body[:at].rstrip(), body[at:]


def test_each_del_goes_where_the_statement_ends():
    a = TensorProxy("a", (2,))
    b = TensorProxy("b", (2,))
    c = TensorProxy("c", (2,))
    d = TensorProxy("d", (2,))
    tagged = Symbol(name="torch.tag", id="torch.tag", fn=None)
    bsyms = [
        # a string argument holding what looks like a comment, with and without a typed output
        BoundSymbol(tagged, (a, 'x  # y: "cpu f32[2]"'), {}, b),
        BoundSymbol(tagged, (d, "'  # '"), {"note": "#  # #"}, None),
        BoundSymbol(tagged, (b, "end"), {}, c),
    ]
    lines = [PrintedLine("  " + bsym_statement(x), (i,)) for i, x in enumerate(bsyms)]
    freed = source_freeing_dead(lines, bsyms, c).splitlines()
    assert len(freed) == len(lines)
    for line, got, dead in zip(lines, freed, ["a", "d", "b"], strict=True):
        code, rest = _split_by_tokenizer(line.text)
        assert got == f"{code}; del {dead}" + (f"  {rest}" if rest else "")
        compile(got.strip(), "<line>", "exec")  # still one statement and one comment


def _containers(t: TensorProxy, n: NumberProxy) -> list:
    """The containers bound symbols hold, and those the hand walks hand to pytree."""
    return [
        (t, 1, None, [t, (n, 2.0)], {"b": t, "a": [None, n]}),
        torch.Size([2, 3]),
        torch.return_types.max((t, n)),
        collections.OrderedDict(z=t, y=(1, n)),
        collections.deque([t, 1, (n,)]),
        collections.namedtuple("P", "x y")(t, [n]),
        (slice(t, None), Ellipsis, torch.float32, "s"),
        {},
        (),
    ]


def test_leaves_are_pytrees_leaves():
    """`leaves`, the hand walk behind bound symbols' flat arguments and outputs, against
    pytree itself on the containers bound symbols hold and on those it hands to pytree."""
    for case in _containers(TensorProxy("t", (2,)), NumberProxy("n", 1)):
        assert leaves(case, []) == pytree.tree_leaves(case), case


def _mutating(x, w):
    h = x @ w
    h[:, 0].mul_(2)  # a view written in place: functionalized, its subsymbols run
    return torch.nn.functional.gelu(h).sum()


@pytest.mark.parametrize("program", ["model", "mutating"])
def test_code_only_lines_are_the_printed_lines_without_comments(program):
    torch.manual_seed(0)
    if program == "model":
        fn, args = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)), (torch.randn(2, 4),)
    else:
        fn, args = _mutating, (torch.randn(2, 4), torch.randn(4, 3, requires_grad=True))
    forward = tv.trace(fn, *args)
    result = tv.autodiff(forward)
    for trace in (forward, result.augmented_forward, result.backward):
        printed = trace.printed_lines(print_depth=0)
        code = trace.printed_lines(print_depth=0, code_only=True)
        assert [line.path for line in code] == [line.path for line in printed]
        for full, lean in zip(printed, code, strict=True):
            if full.text.lstrip().startswith("#"):
                assert lean.text == ""
            else:  # the statement; its type comment, if any, is all that goes
                assert lean.text == full.text or full.text.startswith(lean.text + "  # ")
        compiled = "\n".join(line.text for line in code)
        assert compiled.count("\n") == trace.python(print_depth=0).count("\n")


def test_an_error_in_compiled_code_names_its_bound_symbol():
    def f(x, w):
        return torch.tanh(x @ w)

    trace = tv.trace(f, torch.randn(2, 4), torch.randn(4, 3))
    with pytest.raises(RuntimeError) as raised:
        run_attributed(trace, torch.randn(2, 5), torch.randn(4, 3))  # shapes cannot multiply
    (note,) = raised.value.__notes__
    assert "forward trace" in note and "x @ w" in note, note


def test_map_proxies_is_pytrees_tree_map():
    """`map_proxies`, the hand walk behind `BoundSymbol.rename`, against pytree's tree_map on
    the containers bound symbols hold and on those it hands to pytree."""
    t, u = TensorProxy("t", (2,)), TensorProxy("u", (3,))
    n = NumberProxy("n", 1)
    cases = _containers(t, n)
    mapping = {"t": u, "n": NumberProxy("m", 1)}
    swap = lambda x: mapping.get(x.name, x) if isinstance(x, Proxy) else x  # noqa: E731
    for case in cases:
        got, want = map_proxies(case, lambda p: mapping.get(p.name, p)), pytree.tree_map(swap, case)
        assert type(got) is type(want) and repr(got) == repr(want), case
    bsym = BoundSymbol(Symbol(name="f", id="f", fn=None), cases[0], {"k": cases[4]}, (t, n))
    renamed = bsym.rename(mapping)
    assert repr((renamed.args, renamed.kwargs, renamed.output)) == repr(
        pytree.tree_map(swap, (bsym.args, bsym.kwargs, bsym.output))
    )
