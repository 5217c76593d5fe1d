"""Bytes saved for backward: thunderviz's split (with and without rematerialization) vs
eager autograd's saved tensors (counted with torch.autograd.graph.saved_tensors_hooks), on
the 12-layer GPT of the other benchmarks. Run: `.venv/bin/python -m benchmarks.saved_memory`."""

from __future__ import annotations

import torch

import thunderviz as tv
from benchmarks.common import print_table
from thunderviz.autodiff.remat import rematerialize
from thunderviz.models import GPT, GPTConfig

CFG = GPTConfig(vocab_size=1000, block_size=64, n_layer=12, n_head=4, d_model=128)


def eager_saved_bytes(model, *inputs) -> int:
    """Bytes of every tensor autograd packs for backward, each storage counted once (a
    parameter saved by three nodes is one tensor in memory)."""
    seen: dict[tuple[int, int, tuple[int, ...]], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        seen[key] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(*inputs)
    del loss
    return sum(seen.values())


def main() -> None:
    torch.manual_seed(0)
    model = GPT(CFG)
    idx = torch.randint(0, CFG.vocab_size, (2, 64))
    eager = eager_saved_bytes(model, idx, idx)
    result = tv.autodiff(tv.trace(model, idx, idx))
    remat = rematerialize(result)
    rows = [
        ("eager autograd", eager / 2**20),
        ("thunderviz split", result.saved_bytes / 2**20),
        ("thunderviz split + remat", remat.saved_bytes / 2**20),
    ]
    print(
        f"saved tensors: thunderviz {len(result.saved_for_backward)}, "
        f"after remat {sum(1 for s in remat.saved_for_backward if not s.recomputed)}"
    )
    print_table(
        "Saved for backward (MiB)",
        rows,
        "eager autograd",
        unit="MiB",
        target="thunderviz no more than eager",
    )


if __name__ == "__main__":
    main()
