"""`make demo`: the debugger on a built-in GPT-style model.

Traces a small GPT (forward, augmented forward, backward), prints its trace and a summary,
trains it for a few steps through thunderviz.jit next to eager PyTorch, and writes the
debugger as a standalone HTML file plus a static picture.
"""

from __future__ import annotations

import copy
import os
import sys
import time

import torch

import thunderviz as tv
from thunderviz.models import GPT, GPTConfig

OUT = os.environ.get(
    "THUNDERVIZ_DEMO_OUT",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "out"),
)


def main() -> int:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=256, block_size=32, n_layer=2, n_head=4, d_model=64)
    model = GPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (4, 32))
    targets = torch.randint(0, cfg.vocab_size, (4, 32))

    t0 = time.perf_counter()
    forward = tv.trace(model, idx, targets)
    result = tv.autodiff(forward)
    took = (time.perf_counter() - t0) * 1e3

    lines = forward.python(print_depth=1).splitlines()
    print("\n".join(lines[:12] + ["  ..."] + lines[-28:]))
    print("\n--- backward trace (first lines) ---")
    print("\n".join(result.backward.python(print_depth=0).splitlines()[:30] + ["  ..."]))

    top = sorted(result.saved_for_backward, key=lambda s: -s.bytes)[:5]
    print("\n--- summary ---")
    print(
        f"model: GPT with {cfg.n_layer} layers, d_model {cfg.d_model}, "
        f"{sum(p.numel() for p in model.parameters()):,} parameters"
    )
    print(
        f"forward: {len(forward.bound_symbols)} torch-level calls, "
        f"{sum(1 for _ in forward.walk())} bound symbols at all levels"
    )
    print(
        f"augmented forward: {len(result.augmented_forward.bound_symbols)} bound symbols; "
        f"backward: {len(result.backward.bound_symbols)}"
    )
    print(
        f"saved for backward: {len(result.saved_for_backward)} tensors, "
        f"{result.saved_bytes / 2**20:.2f} MiB; largest:"
    )
    for s in top:
        where = (
            s.fwd_bsym.source.short() if s.fwd_bsym is not None and s.fwd_bsym.source else "input"
        )
        print(
            f"  {s.name:>8} {str(list(s.shape)):>16} {s.bytes / 1024:8.1f} KiB  from "
            f"{s.producer.sym.id if s.producer else 'input'} ({where})"
        )
    print(f"trace + autodiff took {took:.0f} ms")

    eager, jitted = copy.deepcopy(model), tv.jit(copy.deepcopy(model))
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_j = torch.optim.AdamW(jitted.module.parameters(), lr=1e-3)
    print("\n--- three training steps: eager vs thunderviz.jit ---")
    for step in range(3):
        for m, opt in ((eager, opt_e), (jitted, opt_j)):
            opt.zero_grad()
            loss = m(idx, targets)
            loss.backward()
            opt.step()
            if m is eager:
                eager_loss = loss.item()
        print(f"step {step}: eager loss {eager_loss:.6f}  thunderviz loss {loss.item():.6f}")
    diff = max(
        (a - b).abs().max().item()
        for a, b in zip(eager.parameters(), jitted.module.parameters(), strict=True)
    )
    print(f"largest parameter difference after 3 steps: {diff:.2e}")

    print("\n--- the debugger ---")
    os.makedirs(OUT, exist_ok=True)
    session = tv.Session(model, idx, targets, title="demo GPT")
    session.record_backward()  # real values at every backward step, for offline stepping
    worst = max(session.compare_with_autograd(), key=lambda c: c.max_abs_diff)
    print(
        f"backward stepped through {len(session.backward.bound_symbols)} bound symbols; "
        f"largest gradient difference from torch.autograd: {worst.max_abs_diff:.2e} ({worst.name})"
    )
    document = session.document()
    paths = {
        "debugger (open in a browser, works offline)": tv.export_html(
            session, os.path.join(OUT, "demo.html")
        ),
        "saved traces (open in JupyterLab)": tv.save(document, os.path.join(OUT, "demo.tvz")),
        "forward graph, SVG": _write(
            os.path.join(OUT, "demo_forward.svg"), tv.static_svg(document)
        ),
        "forward graph, PNG": _write(
            os.path.join(OUT, "demo_forward.png"), tv.static_png(document)
        ),
        "backward graph, SVG": _write(
            os.path.join(OUT, "demo_backward.svg"), tv.static_svg(document, trace_kind="backward")
        ),
    }
    for what, path in paths.items():
        print(f"{what}: {path}")
    print(
        "\nnotebooks: .venv/bin/jupyter lab examples/quickstart.ipynb "
        "(also find_the_nan.ipynb, custom_transform.ipynb)"
    )
    return 0


def _write(path: str, data: str | bytes) -> str:
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


if __name__ == "__main__":
    sys.exit(main())
