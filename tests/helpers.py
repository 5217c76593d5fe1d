"""Checks against independent references: torch.autograd for gradients, eager for outputs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import thunderviz as tv
from thunderviz.core.proxies import sanitize_name

# Where device-parametrized tests run: the CPU always, a GPU where torch sees one (make
# test-cuda selects the "cuda" cases).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def autograd_reference(
    module: torch.nn.Module, *args: Any, cotangent: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
    """torch.autograd on a deep copy of `module` (its own `.grad` stay as they are): the output
    and {trace argument name of each parameter: its gradient}, plus {"input<i>": gradient} for
    the tensor arguments passed with requires_grad."""
    m = copy.deepcopy(module)
    for p in m.parameters():
        p.grad = None
    inputs = [
        a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
        for a in args
    ]
    out = m(*inputs)
    out.backward(cotangent if cotangent is not None else torch.ones_like(out))
    grads: dict[str, torch.Tensor | None] = {
        sanitize_name(n): p.grad for n, p in m.named_parameters()
    }
    for i, a in enumerate(inputs):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            grads[f"input{i}"] = a.grad
    return out.detach(), grads


def assert_same(got: Any, want: Any) -> None:
    """Two `value_and_grads` results equal, bit for bit."""
    (vg, gg), (vw, gw) = got, want
    torch.testing.assert_close(vg, vw, rtol=0, atol=0)
    for a, b in zip(gg, gw, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def value_and_grads(fn: Any, *args: Any) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """`fn(*args)` (a scalar), detached, and by torch.autograd its gradients with respect to the
    tensor arguments that require grad; `fn` eager or jitted, so both sides are read alike."""
    out = fn(*args)
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    return out.detach(), torch.autograd.grad(out, leaves) if leaves else ()


def check_value_and_grad(
    module: torch.nn.Module, *inputs: Any, rtol: float, atol: float
) -> dict[str, torch.Tensor | None]:
    """thunderviz.value_and_grad(module) against `autograd_reference`: the value, and each
    parameter's gradient by trace argument name. Returns autograd's gradients."""
    loss, expected = autograd_reference(module, *inputs)
    value, grads = tv.value_and_grad(module)(*inputs)
    torch.testing.assert_close(value, loss, rtol=rtol, atol=atol)
    names = [p.name for p in tv.trace(module, *inputs).args]
    for name, g in zip(names[len(inputs) :], grads[len(inputs) :], strict=True):
        torch.testing.assert_close(g, expected[name], rtol=rtol, atol=atol, msg=name)
    return expected


def reference_vjp(
    fn: Any,
    args: tuple[Any, ...],
    cotangents: list[torch.Tensor],
    kwargs: dict[str, Any] | None = None,
) -> tuple[Any, list[torch.Tensor | None]]:
    """torch.autograd's answer: outputs and d<out, ct>/d(each float leaf of args)."""
    kwargs = kwargs or {}
    leaves, spec = pytree.tree_flatten(args)
    leaves = [
        x.detach().requires_grad_(True)
        if isinstance(x, torch.Tensor) and x.is_floating_point()
        else x
        for x in leaves
    ]
    inputs = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
    try:
        out = fn(*pytree.tree_unflatten(leaves, spec), **kwargs)
        outs = [
            o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad
        ]
        grads = (
            torch.autograd.grad(outs, inputs, cotangents[: len(outs)], allow_unused=True)
            if outs
            else [None] * len(inputs)
        )
    except (RuntimeError, NotImplementedError) as e:
        if "not implemented" not in str(e) or "derivative" not in str(e):
            raise
        # an older torch's autograd lacks it (nextafter, narrow_copy, aminmax before 2.13):
        # no reference to compare with, on this torch
        pytest.skip(f"torch {torch.__version__}: {str(e).splitlines()[0]}")
    return out, list(grads)


def thunderviz_vjp(
    fn: Any, args: tuple[Any, ...], cotangents: list[torch.Tensor], **kwargs: Any
) -> tuple[Any, tuple[torch.Tensor | None, ...]]:
    """thunderviz's answer, called like `reference_vjp`: outputs and the gradients of args."""
    return tv.vjp(fn)(args, cotangents, **kwargs)


def check_vjp(
    fn: Any, *args: Any, rtol: float = 1e-7, atol: float = 1e-9, seed: int = 0, **kwargs: Any
) -> None:
    """thunderviz.vjp(fn) against torch.autograd on the same inputs and random cotangents."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        eager_out = fn(*args, **kwargs)
    outs = [o for o in pytree.tree_leaves(eager_out) if isinstance(o, torch.Tensor)]
    cts = [
        torch.randn(o.shape, generator=gen, dtype=o.dtype) if o.is_floating_point() else None
        for o in outs
    ]
    float_cts = [c for c in cts if c is not None]
    ref_out, ref_grads = reference_vjp(fn, args, float_cts, kwargs)
    out, grads = tv.vjp(fn)(args, [c if c is not None else torch.zeros(()) for c in cts], **kwargs)
    for o_ref, o in zip(pytree.tree_leaves(ref_out), pytree.tree_leaves(out), strict=True):
        if isinstance(o_ref, torch.Tensor):
            torch.testing.assert_close(o, o_ref.detach(), rtol=rtol, atol=atol, equal_nan=True)
    ours = [
        g
        for g, x in zip(grads, pytree.tree_leaves(args), strict=True)
        if isinstance(x, torch.Tensor) and x.is_floating_point()
    ]
    assert len(ours) == len(ref_grads)
    for i, (g, r) in enumerate(zip(ours, ref_grads, strict=True)):
        if r is None:
            assert g is None or torch.count_nonzero(g) == 0, (
                f"grad {i}: autograd has none, we have one"
            )
            continue
        assert g is not None, f"grad {i}: autograd has a gradient, thunderviz has None"
        torch.testing.assert_close(
            g, r, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m, i=i: f"grad of input {i}: {m}"
        )


def check_each_output(fn: Any, *args: Any, **kwargs: Any) -> None:
    """check_vjp on each output of `fn` alone: the gradients of all outputs add up, so a nan
    from one (at an edge where autograd's is nan too) would hide a wrong value of another."""
    with torch.no_grad():
        n = len(fn(*args))
    for i in range(n):
        check_vjp(lambda *a, i=i: fn(*a)[i], *args, **kwargs)


def program_text(trace: tv.Trace) -> str:
    """The printed trace without its first line (provenance: how long tracing took)."""
    return str(trace).split("\n", 1)[1]


def fingerprint(trace: tv.Trace) -> list[tuple]:
    """Every bound symbol at every level as comparable values: what two traces that must be
    the same program (stamped or not, fast or full fake conversion) are compared by."""
    return [
        (
            b.sym.id,
            repr(b.args),
            repr(b.kwargs),
            repr(b.output),
            repr(b.source),
            b.module_path,
            sorted(t.name for t in b.tags),
            b.header,
        )
        for b in trace.walk()
    ]


def jitted_twin(make: Any) -> tuple[torch.nn.Module, torch.nn.Module, Any]:
    """(eager, ours, tv.jit(ours)): a float64 model built under seed 0, and a copy of it that
    trains through jit, for step-by-step comparisons with eager."""
    torch.manual_seed(0)
    eager = make().double()
    ours = copy.deepcopy(eager)
    return eager, ours, tv.jit(ours)


def assert_same_state(ours: torch.nn.Module, eager: torch.nn.Module, tol: float = 1e-12) -> None:
    """`ours`'s parameters, their gradients and its buffers equal to `eager`'s, by name."""
    close = dict(rtol=tol, atol=tol)
    for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q, p, **close, msg=name)
        assert (q.grad is None) == (p.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, **close, msg=name)
    for (name, b), c in zip(eager.named_buffers(), ours.buffers(), strict=True):
        torch.testing.assert_close(c, b, **close, msg=name)


def tiny_hf_gpt2(dropout: float = 0.0) -> torch.nn.Module:
    """Hugging Face GPT-2 from a tiny config (2 layers, width 16, vocabulary 64), float64,
    built under seed 0; skips the test where transformers is not installed."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2, resid_pdrop=dropout,
        embd_pdrop=dropout, attn_pdrop=dropout,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).double()


def tiny_gpt2_loss(model: torch.nn.Module) -> torch.Tensor:
    """The language-model loss of `tiny_hf_gpt2` on a fixed batch of 2 sequences of 8."""
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(3))
    return model(ids, labels=ids, use_cache=False).loss


def install_user_rule(monkeypatch: Any, op: Any, grad: Any) -> None:
    """For the test's duration, a user rule for the unary ATen op `op` (a thunderviz Symbol)
    whose gradient is `grad(g, a, out)`: user rules win over the built-ins, so a census
    can be shown a wrong gradient."""
    from thunderviz.autodiff.api import user_rules
    from thunderviz.autodiff.registry import RuleSet

    rules = RuleSet("installed by a test")

    @rules.grad(op)
    def rule(a: Any) -> Any:
        out = op(a)
        tv.put_grad(a, grad(tv.get_grad(out), a, out))
        return out

    monkeypatch.setitem(user_rules.rules, op.id, rules.rules[op.id])
