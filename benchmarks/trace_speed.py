"""Time to trace a 12-layer GPT (d_model 768, 12 heads, vocab 50304, batch 4, seq 256) with
fake tensors: thunderviz.trace(fake=True) vs torch.export.export vs make_fx (fake mode),
in one process. Run: `make bench` or `.venv/bin/python benchmarks/trace_speed.py`."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import thunderviz as tv
from benchmarks.common import best_of, print_table
from thunderviz.models import GPT, GPTConfig


def main() -> None:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50304, block_size=256, n_layer=12, n_head=12, d_model=768)
    model = GPT(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (4, 256))
    tv.trace(model, idx, idx, fake=True)  # warm up imports and decomposition tables

    def ours() -> None:
        tv.trace(model, idx, idx, fake=True)

    def export() -> None:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake_model_args = (mode.from_tensor(idx), mode.from_tensor(idx))
            torch.export.export(model, fake_model_args)

    def fx() -> None:
        params = {**dict(model.named_parameters()), **dict(model.named_buffers())}

        def f(p, a, b):
            return torch.func.functional_call(model, p, (a, b))

        make_fx(f, tracing_mode="fake")(params, idx, idx)

    n_ops = sum(1 for _ in tv.trace(model, idx, idx, fake=True).walk())
    rows = [("thunderviz.trace(fake=True)", best_of(ours)),
            ("make_fx(tracing_mode='fake')", best_of(fx, 2)),
            ("torch.export.export", best_of(export, 1))]
    print_table(f"Tracing a 12-layer GPT-2-small-sized model ({n_ops} bound symbols, all levels)",
                rows, "thunderviz.trace(fake=True)",
                target="thunderviz at least 10x faster than torch.export.export")


if __name__ == "__main__":
    main()
