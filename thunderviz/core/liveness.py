"""The compiled twin of a trace frees each value after the statement that last reads it.

Generated code keeps every value it made as a local until it returns, so a long backward holds
all its gradient temporaries at once, where eager's autograd frees each as soon as the next
node has read it. Besides the memory, the heap then grows to that peak on every step and
shrinks back when the function returns: glibc hands the freed top of the heap back to the
system and the next step faults the pages in again (on HF GPT-2 tiny, a jit step measured
1.2-1.3x eager's CPU time this way, 0.92-0.97x with the `del`s). So each statement is followed
by `del` of the values nothing later reads, on the statement's own line: line numbers stay
those of the printed trace, which error attribution maps back to bound symbols. Outputs are
never deleted; neither is a value last read by a functionalized call (its statements are its
subsymbols'), which the function's return frees as before. `jit` compiles its augmented
forward and its backward this way; the printed traces are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.core.proxies import NumberProxy, Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol

__all__ = ["dying_names", "source_freeing_dead"]


def _reads(bsym: BoundSymbol) -> list[str]:
    """The names a statement reads as it runs (a functionalized call: its subsymbols' too),
    in first-read order (only that and each name's last reader matter)."""
    names = [p.name for p in bsym.flat_proxy_args]
    if bsym.executes_subsymbols:
        for sub in bsym.subsymbols:
            names += _reads(sub)
    return names


def dying_names(bsyms: list[BoundSymbol], output: Any) -> dict[int, list[str]]:
    """Per top-level statement, the names read last there (in first-read order): what the
    compiled twin deletes after it, and the interpreted run too (executor/interpreted.py)."""
    kept = {p.name for p in pytree.tree_leaves(output) if isinstance(p, Proxy)}
    last: dict[str, int] = {}
    for i, bsym in enumerate(bsyms):
        for name in _reads(bsym):
            last[name] = i
    dying: dict[int, list[str]] = {}
    for name, i in last.items():
        if name not in kept and not bsyms[i].executes_subsymbols:
            dying.setdefault(i, []).append(name)
    return dying


def _then(line: str, bsym: BoundSymbol, statement: str, commented: bool) -> str:
    """`line`, printed by `codegen.bsym_statement(bsym)`, with `statement` run after it.

    That line is the call, then `  # ` and a type comment exactly when the bound symbol has a
    tensor or number output; a type comment (`t3: "cpu f32[4]"`, `n0: "int 2"`) holds no
    `#`, so the comment starts at the line's last `  # `. Without one, a `#` on the line is
    inside a string argument. (No tokenizer: it was most of this pass's time.)"""
    typed = commented and any(
        isinstance(p, TensorProxy | NumberProxy) for p in bsym.flat_proxy_outs
    )
    if typed:
        code, _, rest = line.rpartition("  # ")
        return f"{code.rstrip()}; {statement}  # {rest}"
    return f"{line.rstrip()}; {statement}"


def source_freeing_dead(
    lines: Iterable[Any], bsyms: list[BoundSymbol], output: Any, *, commented: bool = True
) -> str:
    """The source of printed `lines` (text and bound-symbol path each, `print_depth=0`) with
    each top-level statement followed by `del` of the values it reads last. `commented=False`:
    lines printed `code_only` (a comment is an empty line, a statement has no comment)."""
    dying = dying_names(bsyms, output)
    out = []
    for line in lines:
        text, path = line.text, line.path
        if path is not None and len(path) == 1 and text and not text.lstrip().startswith("#"):
            names = dying.pop(path[0], None)
            if names:
                statement = "del " + ", ".join(dict.fromkeys(names))
                text = _then(text, bsyms[path[0]], statement, commented)
        out.append(text)
    return "\n".join(out)
