"""IPython magics: `%thunder model(x, y)` and `%%thunder` show the debugger for a call.

    %load_ext thunderviz                (or `%load_ext thunderviz.widgets`)
    %thunder model(x, y)                # trace, differentiate, show the debugger
    %thunder --depth 2 --fake model(x)  # options first, then the call
    w = %thunder model(x)               # the widget, to drive from Python

    %%thunder --no-backward
    x = torch.randn(4, 8)
    model(x)                            # the last line is the call to debug

The call is parsed with `ast`: it must be one call expression `f(args)`; the callee and each
argument (`*args`, `**kwargs` too) are evaluated as expressions in the user's namespace, and
the call itself is made by thunderviz (traced), not by IPython. In `%%thunder`, the lines
before the last run as ordinary code in the user's namespace first.
"""

from __future__ import annotations

import argparse
import ast
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from thunderviz.widgets.show import show
from thunderviz.widgets.widget import DebuggerWidget

__all__ = ["ThunderMagics", "load_ipython_extension", "parse_options", "parse_call", "ThunderCall"]

USAGE = (
    "usage: %thunder [--fake] [--no-backward] [--depth N] [--tab TAB] callee(args...)\n"
    "       %%thunder [options]   (the cell's last line is the call)"
)


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (IPython shows it as a short message) instead of
    printing and exiting."""

    def error(self, message: str) -> Any:
        raise UsageError(f"%thunder: {message}\n{USAGE}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise UsageError(message or USAGE)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--depth takes a whole number, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"--depth must be 0 or more, not {value}")
    return value


def _parser() -> _Parser:
    p = _Parser(
        prog="%thunder",
        add_help=False,
        description="Trace a call, differentiate it and show the thunderviz debugger.",
    )
    p.add_argument(
        "--fake",
        action="store_true",
        help="trace with FakeTensors (no values: no backward, no stepping)",
    )
    p.add_argument(
        "--no-backward", dest="backward", action="store_false", help="only the forward trace"
    )
    p.add_argument(
        "--depth",
        type=_non_negative,
        default=1,
        help="levels of subsymbols shown in the printed traces (default 1)",
    )
    p.add_argument(
        "--tab",
        default="",
        help="the tab to open: forward_backward, forward, backward, saved, transforms",
    )
    p.add_argument("-h", "--help", action="store_true", help="show this help")
    return p


def parse_options(tokens: list[str]) -> argparse.Namespace:
    """The magic's options from their tokens (UsageError on a bad one)."""
    return _parser().parse_args(tokens)


def split_options(line: str) -> tuple[list[str], str]:
    """Leading `--option [value]` tokens of a line magic, and the rest (the call)."""
    rest = line.lstrip()
    tokens: list[str] = []
    takes_value = {"--depth", "--tab"}
    while rest.startswith("-"):
        head, _, tail = rest.partition(" ")
        tokens.append(head)
        rest = tail.lstrip()
        if head in takes_value:
            value, _, tail = rest.partition(" ")
            if not value:
                break
            tokens.append(value)
            rest = tail.lstrip()
    return tokens, rest


class ThunderCall:
    """A parsed call: the callee expression and its arguments, as AST nodes."""

    def __init__(self, node: ast.Call, source: str) -> None:
        self.node = node
        self.source = source

    def evaluate(self, namespace: dict[str, Any]) -> tuple[Any, list[Any], dict[str, Any]]:
        """The callee, positional and keyword arguments, each evaluated in `namespace`."""
        fn = _eval(self.node.func, namespace, "the callee")
        args: list[Any] = []
        for a in self.node.args:
            if isinstance(a, ast.Starred):
                args.extend(_eval(a.value, namespace, "a *argument"))
            else:
                args.append(_eval(a, namespace, "an argument"))
        kwargs: dict[str, Any] = {}
        for kw in self.node.keywords:
            if kw.arg is None:
                kwargs.update(_eval(kw.value, namespace, "a **argument"))
            else:
                kwargs[kw.arg] = _eval(kw.value, namespace, f"argument {kw.arg}")
        return fn, args, kwargs


def _eval(node: ast.expr, namespace: dict[str, Any], what: str) -> Any:
    code = compile(ast.Expression(body=node), f"<%thunder {what}>", "eval")
    return eval(code, namespace)  # an expression the user wrote, in their namespace


def parse_call(source: str) -> ThunderCall:
    """Parse `f(x, y, k=v)`; UsageError for anything that is not one call expression."""
    text = source.strip()
    if not text:
        raise UsageError(f"%thunder needs a call to debug, like `%thunder model(x)`\n{USAGE}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise UsageError(f"%thunder: cannot parse {text!r}: {e.msg}\n{USAGE}") from None
    if not isinstance(tree.body, ast.Call):
        kind = type(tree.body).__name__
        raise UsageError(
            f"%thunder expects one call like `model(x, y)`, got {kind} {text!r}\n{USAGE}"
        )
    return ThunderCall(tree.body, text)


def split_cell(cell: str) -> tuple[ast.Module | None, ThunderCall]:
    """A `%%thunder` cell: the statements to run first, and the call on its last line."""
    try:
        tree = ast.parse(cell, mode="exec")
    except SyntaxError as e:
        raise UsageError(f"%%thunder: the cell does not parse (line {e.lineno}: {e.msg})") from None
    if not tree.body:
        raise UsageError(f"%%thunder: the cell is empty; end it with the call to debug\n{USAGE}")
    last = tree.body[-1]
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)):
        raise UsageError(
            "%%thunder: the cell's last line must be the call to debug, like "
            f"`model(x)`; it is a {type(last).__name__}\n{USAGE}"
        )
    setup = ast.Module(body=tree.body[:-1], type_ignores=[]) if len(tree.body) > 1 else None
    return setup, ThunderCall(last.value, ast.get_source_segment(cell, last.value) or "")


@magics_class
class ThunderMagics(Magics):
    """`%thunder` / `%%thunder` (see the module docstring)."""

    @property
    def _user_ns(self) -> dict[str, Any]:
        """The user's namespace: magics are registered on a shell, so there is one."""
        assert self.shell is not None
        return self.shell.user_ns

    def _run(self, options: argparse.Namespace, call: ThunderCall) -> DebuggerWidget | None:
        fn, args, kwargs = call.evaluate(self._user_ns)
        if not callable(fn):
            raise UsageError(
                f"%thunder: {ast.unparse(call.node.func)} is a "
                f"{type(fn).__name__}, not a function or module"
            )
        return show(
            fn,
            *args,
            fake=options.fake,
            backward=options.backward,
            depth=options.depth,
            tab=options.tab,
            **kwargs,
        )

    @line_magic
    def thunder(self, line: str) -> DebuggerWidget | None:
        """%thunder [--fake] [--no-backward] [--depth N] [--tab TAB] model(x, y)"""
        tokens, rest = split_options(line)
        options = parse_options(tokens)
        if options.help:
            print(_parser().format_help())
            return None
        return self._run(options, parse_call(rest))

    @cell_magic("thunder")
    def thunder_cell(self, line: str, cell: str) -> DebuggerWidget | None:
        """%%thunder [options]: the cell's last line is the call to debug."""
        try:
            tokens = shlex.split(line)
        except ValueError as e:
            raise UsageError(f"%%thunder: {e}\n{USAGE}") from None
        options = parse_options(tokens)
        if options.help:
            print(_parser().format_help())
            return None
        setup, call = split_cell(cell)
        if setup is not None:
            exec(compile(setup, "<%%thunder cell>", "exec"), self._user_ns)  # the user's code
        return self._run(options, call)


def load_ipython_extension(ip: Any) -> None:
    """`%load_ext thunderviz.widgets` registers `%thunder` and `%%thunder`."""
    ip.register_magics(ThunderMagics)
