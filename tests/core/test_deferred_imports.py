"""While thunderviz works, torch._dynamo and sympy stay unimported (core/deferred_imports.py):
checked in a fresh process, where nothing imported them yet. The results are eager's, nothing
of the stand-ins is left behind, torch.compile imports and uses the real dynamo afterwards,
and each answer given for symbolic_shapes equals the real helper's."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _in_a_fresh_interpreter(script: str, *argv: str) -> str:
    """What the script printed, run where nothing imported dynamo or sympy yet."""
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


_SCRIPT = textwrap.dedent(
    """
    import builtins, gc, sys, types
    import torch
    import torch.nn.functional as F
    import thunderviz as tv

    deferred = ("torch._dynamo", "sympy", "torch.fx.experimental.symbolic_shapes")
    assert not any(m in sys.modules for m in deferred), "imported before the test began"
    real_import = builtins.__import__
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.GELU(), torch.nn.Linear(8, 3)
    ).double()
    x, y = torch.randn(5, 4, dtype=torch.float64), torch.tensor([0, 2, 1, 1, 0])

    def grads(model):
        model.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in m.parameters()]

    want = grads(m)
    got = grads(tv.jit(m))
    tv.trace(m, x)
    for name in deferred:
        assert name not in sys.modules, f"thunderviz imported {name}"
    assert builtins.__import__ is real_import, "the import hook was left installed"
    for a, b in zip([want[0], *want[1]], [got[0], *got[1]], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    # no function keeps the stand-in's answer as its cached dynamo wrapper
    inner = torch._compile._disable_dynamo(lambda: None).__code__
    wrappers = [
        f for f in gc.get_objects() if type(f) is types.FunctionType and f.__code__ is inner
    ]
    assert len(wrappers) > 100, len(wrappers)
    for w in wrappers:
        fn = w.__closure__[w.__code__.co_freevars.index("fn")].cell_contents
        assert getattr(fn, "__dynamo_disable", None) is None, fn

    # torch.compile afterwards: the real dynamo, whose wrappers are now built
    compiled = torch.compile(m, backend="aot_eager")
    again = grads(compiled)
    assert "torch._dynamo" in sys.modules
    for a, b in zip([want[0], *want[1]], [again[0], *again[1]], strict=True):
        torch.testing.assert_close(a, b)
    print("ok")
    """
)


def test_thunderviz_leaves_dynamo_and_sympy_unimported_and_nothing_behind():
    assert _in_a_fresh_interpreter(_SCRIPT).strip().endswith("ok")


_ANSWERS = textwrap.dedent(
    """
    import sys
    import torch
    from thunderviz.core import symbolic_stand_ins as stand_ins

    size = torch.Size([3, 4])
    cases = [
        ("expect_true", (True,)), ("expect_true", (False,)),
        ("guard_or_false", (True,)), ("guard_or_false", (False,)),
        ("guard_or_true", (False,)), ("guard_size_oblivious", (True,)),
        ("statically_known_true", (False,)), ("guard_int", (7,)),
        ("guarding_hint_or_throw", (5,)), ("guarding_hint_or_throw", (False,)),
        ("has_guarding_hint", (3,)), ("has_guarding_hint", (2.5,)),
        ("is_nested_int", (3,)), ("is_nested_int", (True,)),
        ("sym_and", (True,)), ("sym_and", (True, False)), ("sym_and", (True, True, True)),
        ("sym_or", (False, False)), ("sym_or", (False, True)),
        ("sym_eq", (3, 3)), ("sym_eq", (3, 4)), ("sym_eq", (size, (3, 4))),
        ("sym_eq", (size, [3, 5])), ("sym_eq", ((1, 2), (1, 2, 3))),
        ("sym_eq", ([[1, 2], [3]], ([1, 2], (3,)))), ("sym_eq", ((), [])),
        ("sym_eq", ((1, 2), 3)),  # an error in torch's too
        # what a scatter's or a copy's meta kernel asks of a tensor of concrete sizes
        ("free_unbacked_symbols", (torch.randn(2, 3),)),
        ("free_unbacked_symbols", (torch.empty(4, 6, device="meta")[:, ::2],)),
        ("free_unbacked_symbols", (torch.nn.Parameter(torch.randn(3)),)),
        ("free_unbacked_symbols", (5,)), ("free_unbacked_symbols", ([2, [3, 4]],)),
        ("free_unbacked_symbols", (None,)),
    ]
    shapes = stand_ins.stand_in_for(stand_ins.SHAPES, ("x",), 0)
    sympy_ = stand_ins.stand_in_for("sympy", None, 0)

    def outcome(f, args):
        try:
            return "value", f(*args)
        except AssertionError as e:
            return "error", type(e)

    ours = [outcome(getattr(shapes, name), args) for name, args in cases]
    assert not isinstance(1, sympy_.Basic) and not isinstance(size, sympy_.Basic)
    assert "sympy" not in sys.modules and stand_ins.SHAPES not in sys.modules

    import sympy
    import torch.fx.experimental.symbolic_shapes as real

    for (name, args), got in zip(cases, ours, strict=True):
        want = outcome(getattr(real, name), args)
        assert got == want and type(got[1]) is type(want[1]), (name, args, got, want)
    # with the real modules loaded, the stand-ins are the real ones
    assert sympy_.Basic is sympy.Basic and shapes.ShapeEnv is real.ShapeEnv
    assert shapes.guard_or_false(True) is True
    print("ok")
    """
)


def test_each_answer_for_symbolic_shapes_is_the_real_helpers():
    assert _in_a_fresh_interpreter(_ANSWERS).strip().endswith("ok")


_ONLY_TORCH = textwrap.dedent(
    """
    import sys
    import torch
    from thunderviz.core.working import working

    def user_code():
        import sympy  # a program's own import, inside thunderviz's scope
        return sympy

    with working():
        got = user_code()
    assert got is sys.modules["sympy"], got
    print("ok")
    """
)


def test_a_programs_own_import_of_sympy_is_the_real_one():
    assert _in_a_fresh_interpreter(_ONLY_TORCH).strip().endswith("ok")


_TRACES = textwrap.dedent(
    """
    import sys
    if sys.argv[1] == "loaded":
        import sympy, torch.fx.experimental.symbolic_shapes  # as an optimizer's import does
    import torch
    import torch.nn.functional as F
    import thunderviz as tv
    from benchmarks.programs import PROGRAMS

    torch.manual_seed(0)

    def ops(x, w, idx, mask):
        h = F.conv2d(x, w, padding=1).relu()
        h = F.max_pool2d(h, 2)
        h = F.interpolate(h, scale_factor=2.0, mode="bilinear")
        h = F.layer_norm(h, h.shape[-2:])
        flat = h.flatten(1)
        top, _ = flat.topk(3, dim=1)
        picked = flat[mask] * 2 + flat.index_select(1, idx).sum()
        q = flat.view(2, 4, -1)
        att = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        s, _ = flat.sort(dim=1)
        # select, slice and diagonal: their backwards' scatters ask free_unbacked_symbols
        parts = flat[0].sum() + flat[:, 1:].square().sum() + q[0].diagonal().sum()
        return top.sum() + picked.sum() + att.logsumexp(-1).sum() + s.cumsum(1).mean() + parts

    x = torch.randn(2, 3, 8, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([0, 5, 7])
    mask = torch.rand(2, 256) > 0.5
    programs = [("ops", ops, (x, w, idx, mask))]
    for title, build in PROGRAMS:
        if "HF" not in title:
            model, args, _ = build("cpu")
            programs.append((title, model, args))
    for title, fn, args in programs:
        t = tv.trace(fn, *args)
        ad = tv.autodiff(t)
        for each in (t, ad.augmented_forward, ad.backward):
            print(title, each.python(include_header=False))
    deferred = ("sympy", "torch.fx.experimental.symbolic_shapes")
    print("loaded:", sorted(m for m in deferred if m in sys.modules))
    """
)


def test_traces_with_the_stand_ins_are_those_with_the_real_modules():
    fresh = _in_a_fresh_interpreter(_TRACES, "fresh")
    loaded = _in_a_fresh_interpreter(_TRACES, "loaded")
    assert fresh.endswith("loaded: []\n"), fresh[-200:]  # the stand-ins answered throughout
    assert loaded.endswith("loaded: ['sympy', 'torch.fx.experimental.symbolic_shapes']\n")
    assert fresh.rsplit("loaded:", 1)[0] == loaded.rsplit("loaded:", 1)[0]
