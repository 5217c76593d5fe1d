"""Quoting: the one door through which user text enters generated Python.

Traces are printed as Python and compiled (`Trace.python_callable()`), and the text in them
comes partly from the user: module paths (often config keys or label names), parameter
names, file names, source lines, function names. Text pasted into source code is code, so
every such string goes through one of these functions before it reaches a printed line:

- `comment(text)`: a comment that stays on its line. Everything Python's tokenizer or
  `str.splitlines()` would treat as a line break (\\n, \\r, \\x0b, \\x0c, \\x1c-\\x1e, \\x85,
  \\u2028, \\u2029), other control characters, lone surrogates (not encodable as UTF-8, so
  `compile` would fail) and invisible format characters (bidi overrides that make a line
  read differently from how it runs) are written as `\\x..`/`\\u....` escapes.
- `string(text)`: a Python string literal (`repr`, which escapes all of the above).
- `identifier(wanted)`: a name usable as a variable, derived from `wanted`. Python reads
  identifiers after NFKC normalization (`ﬁ` and `fi` are the same variable, `w²` is not an
  identifier at all), so names are normalized first, then anything that is not an
  identifier character becomes `_`.
- `is_identifier(name)`: whether `name` can be printed as-is (an identifier, already in
  NFKC form, not a keyword).
- `code_line(text)`: the last line of defence for a generated statement: it must be one
  line. A statement that spans lines means a string got in unquoted; refuse to print it.
"""

from __future__ import annotations

import functools
import keyword
import unicodedata

__all__ = [
    "comment",
    "comment_text",
    "string",
    "identifier",
    "is_identifier",
    "code_line",
    "UnsafeCodeError",
]


class UnsafeCodeError(ValueError):
    """Generated code would not be what it looks like (a statement spanning lines)."""


# Unicode categories escaped in comments: controls (Cc: every ASCII/C1 line break, NUL),
# line/paragraph separators (Zl, Zp), surrogates (Cs), format characters (Cf: bidi
# overrides, zero-width characters), unassigned (Cn) and private use (Co).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Zl", "Zp", "Cs", "Cf", "Cn", "Co"})
_KEPT = frozenset({"\t"})  # the printer's own separator in source comments
_escape_cache: dict[str, str] = {}


def _escape(ch: str) -> str:
    cached = _escape_cache.get(ch)
    if cached is None:
        if ch in _KEPT or unicodedata.category(ch) not in _ESCAPED_CATEGORIES:
            cached = ch
        else:
            cached = ascii(ch)[1:-1]  # '\n' -> \n, '\u2028' -> \u2028, '\ud800' -> \ud800
        _escape_cache[ch] = cached
    return cached


def comment_text(text: object) -> str:
    """`text` as the body of a one-line comment (see the module docstring)."""
    s = str(text)
    if s.isascii() and s.isprintable():
        return s  # the common case: nothing to escape (tab is not printable: falls through)
    return "".join(_escape(ch) for ch in s)


def comment(text: object) -> str:
    """`# text`, guaranteed to stay one comment on one line."""
    return "# " + comment_text(text)


def string(text: str) -> str:
    """A Python literal for `text`; `repr` escapes line breaks, controls and surrogates."""
    return repr(str(text))


def is_identifier(name: str) -> bool:
    """Printable as a name as-is: an identifier, NFKC-stable, not a keyword."""
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and unicodedata.normalize("NFKC", name) == name
    )


# A trace claims one name per parameter and buffer, the same paths trace after trace.
@functools.lru_cache(maxsize=8192)
def identifier(wanted: str, fallback: str = "_") -> str:
    """A valid, NFKC-normalized, non-keyword identifier derived from `wanted`:
    "blocks.0.weight" -> "blocks_0_weight", "w²" -> "w2", "ﬁ" -> "fi", "if" -> "if_"."""
    name = unicodedata.normalize("NFKC", str(wanted))
    name = "".join(ch if ("_" + ch).isidentifier() else "_" for ch in name)
    if not name or not name.isidentifier():  # empty, or starts with a digit or a mark
        name = "_" + name
    if keyword.iskeyword(name):
        name += "_"
    # Replacing characters can leave a string NFKC would still change (a combining mark
    # after "_"); such names are rare enough to fall back to a plain generated one.
    return name if is_identifier(name) else fallback


# Everything any reader of generated source splits lines on: Python's tokenizer (\n, \r)
# and str.splitlines() (which also splits on \x0b \x0c \x1c \x1d \x1e \x85 \u2028 \u2029).
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def code_line(text: str) -> str:
    """`text` unchanged when it is a single line of code; UnsafeCodeError otherwise."""
    if not text.isascii() or not text.isprintable():
        bad = next(
            (
                ch
                for ch in text
                if ch in _LINE_BREAKS or ch == "\x00" or unicodedata.category(ch) == "Cs"
            ),
            None,
        )
        if bad is not None:
            raise UnsafeCodeError(
                f"refusing to print generated code containing {ascii(bad)}: {ascii(text[:200])}"
            )
    return text
