"""Fake-tensor tracing of a GPT-2-small-sized model: thunderviz.trace(fake=True) vs
torch.export.export, in one process, on two models:

- Hugging Face GPT-2 built from a config (n_layer 12, n_embd 768, n_head 12, vocab 50257,
  n_positions 256; no KV cache, whose object torch.export cannot return): a model the
  project did not write for itself;
- the project's own GPT (thunderviz.models.GPT, the same sizes, vocab 50304);
- a torchvision-style CNN (benchmarks/programs.py's ResNet-10 shape, in eval mode) on a
  batch of 32 ImageNet-sized images, and the benchmarks' small program (two linears and a
  cross-entropy): a program of a few ops, where fixed costs show.

Input for the GPTs: token ids of batch 4, sequence 256. The first call of each contender is its
own row (it pays what a user's first call pays in this process: thunderviz is measured first,
so it also pays the warm-up the two share). Then `rounds` interleaved runs (thunderviz, export,
thunderviz, ...) so machine noise hits both sides alike: medians with min and max.
Run: `.venv/bin/python -m benchmarks.trace_speed [rounds]`."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import transformers

import thunderviz as tv
from benchmarks.programs import SmallProgram, SmallResNet
from thunderviz.models import GPT, GPTConfig

BATCH, SEQ = 4, 256


def hf_gpt2() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    cfg = transformers.GPT2Config(
        n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=SEQ, use_cache=False
    )
    model = transformers.GPT2LMHeadModel(cfg).eval()
    return model, (torch.randint(0, cfg.vocab_size, (BATCH, SEQ)),)


def our_gpt() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    cfg = GPTConfig(vocab_size=50304, block_size=SEQ, n_layer=12, n_head=12, d_model=768)
    idx = torch.randint(0, cfg.vocab_size, (BATCH, SEQ))
    return GPT(cfg).eval(), (idx, idx)


def resnet() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    return SmallResNet().eval(), (torch.randn(32, 3, 224, 224),)


def small() -> tuple[torch.nn.Module, tuple[Any, ...]]:
    return SmallProgram(), (torch.randn(8, 16), torch.randint(0, 4, (8,)))


MODELS = [
    ("Hugging Face GPT-2 (GPT2LMHeadModel from GPT2Config)", hf_gpt2),
    ("thunderviz.models.GPT", our_gpt),
    ("ResNet-10-style CNN, batch 32 at 224x224", resnet),
    ("small program (2 linears, CE)", small),
]


def contenders(model: torch.nn.Module, args: tuple[Any, ...]) -> dict[str, Callable[[], Any]]:
    return {
        "thunderviz.trace(fake=True)": lambda: tv.trace(model, *args, fake=True),
        "torch.export.export": lambda: torch.export.export(model, args),
    }


def seconds(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(rounds: int = 7) -> None:
    torch.manual_seed(0)
    print(
        f"Fake-tensor trace, batch {BATCH}, sequence {SEQ}; median [min, max] of {rounds} "
        f"interleaved runs after the first call; {torch.get_num_threads()} torch thread(s)"
    )
    for title, make in MODELS:
        model, args = make()
        fns = contenders(model, args)
        first = {name: seconds(fn) for name, fn in fns.items()}
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                times[name].append(seconds(fn))
        n_bsyms = sum(1 for _ in tv.trace(model, *args, fake=True).walk())
        ours = "thunderviz.trace(fake=True)"
        base_first, base = first[ours], statistics.median(times[ours])
        print(f"\n{title}: {n_bsyms} bound symbols, all levels")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(
                f"  {name:28} first call {first[name]:7.3f} s ({first[name] / base_first:5.2f}x)"
                f"   median {med:7.3f} s [{min(ts):.3f}, {max(ts):.3f}] ({med / base:5.2f}x)"
            )
    print(
        "\nratios are each contender's time over thunderviz's; "
        "target: torch.export.export at least 10x thunderviz.trace(fake=True)"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
