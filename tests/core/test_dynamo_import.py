"""While thunderviz works, torch._dynamo stays unimported (core/dynamo_import.py): checked in
a fresh process, where nothing imported it yet. The results are eager's, nothing of the
stand-in is left behind, and torch.compile imports and uses the real dynamo afterwards."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import builtins, gc, sys, types
    import torch
    import torch.nn.functional as F
    import thunderviz as tv

    assert "torch._dynamo" not in sys.modules, "imported before the test began"
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
    assert "torch._dynamo" not in sys.modules, "thunderviz imported torch._dynamo"
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


def test_thunderviz_leaves_dynamo_unimported_and_nothing_behind():
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
