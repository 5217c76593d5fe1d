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

OUT = os.environ.get("THUNDERVIZ_DEMO_OUT", os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "out"))


def main() -> int:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=256, block_size=32, n_layer=2, n_head=4, d_model=64)
    model = GPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (4, 32))

    t0 = time.perf_counter()
    forward = tv.trace(model, idx, idx)
    result = tv.autodiff(forward)
    took = (time.perf_counter() - t0) * 1e3

    lines = forward.python(print_depth=1).splitlines()
    print("\n".join(lines[:12] + ["  ..."] + lines[-28:]))
    print("\n--- backward trace (first lines) ---")
    print("\n".join(result.backward.python(print_depth=0).splitlines()[:30] + ["  ..."]))

    top = sorted(result.saved_for_backward, key=lambda s: -s.bytes)[:5]
    print("\n--- summary ---")
    print(f"model: GPT with {cfg.n_layer} layers, d_model {cfg.d_model}, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters")
    print(f"forward: {len(forward.bound_symbols)} torch-level calls, "
          f"{sum(1 for _ in forward.walk())} bound symbols at all levels")
    print(f"augmented forward: {len(result.augmented_forward.bound_symbols)} bound symbols; "
          f"backward: {len(result.backward.bound_symbols)}")
    print(f"saved for backward: {len(result.saved_for_backward)} tensors, "
          f"{result.saved_bytes / 2**20:.2f} MiB; largest:")
    for s in top:
        where = s.fwd_bsym.source.short() if s.fwd_bsym is not None and s.fwd_bsym.source else "input"
        print(f"  {s.name:>8} {str(list(s.shape)):>16} {s.bytes / 1024:8.1f} KiB  from "
              f"{s.producer.sym.id if s.producer else 'input'} ({where})")
    print(f"trace + autodiff took {took:.0f} ms")

    eager, jitted = copy.deepcopy(model), tv.jit(copy.deepcopy(model))
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_j = torch.optim.AdamW(jitted.module.parameters(), lr=1e-3)
    print("\n--- three training steps: eager vs thunderviz.jit ---")
    for step in range(3):
        for m, opt in ((eager, opt_e), (jitted, opt_j)):
            opt.zero_grad()
            loss = m(idx, idx)
            loss.backward()
            opt.step()
            if m is eager:
                eager_loss = loss.item()
        print(f"step {step}: eager loss {eager_loss:.6f}  thunderviz loss {loss.item():.6f}")
    diff = max((a - b).abs().max().item() for a, b in
               zip(eager.parameters(), jitted.module.parameters(), strict=True))
    print(f"largest parameter difference after 3 steps: {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
