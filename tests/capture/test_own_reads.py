"""While a program is traced, the recorder's TorchFunctionMode sees every torch call the
program makes, and every one thunderviz's own code makes in the program's frames (a
stamped block's bookkeeping, the hooks around modules) unless that code turns torch
functions off. Ours are not the program's: each would cost a handler call (reading a
tensor's `_version` or `stride()` went from ~0.1 to 1-8 µs), and one the recorder took for
the program's would land in the trace. So none reaches it, but the grad-mode switch around
a custom Function's forward, which the recorder sees as it sees the program's `no_grad`."""

from __future__ import annotations

import sys

import pytest
import torch

import thunderviz as tv
from tests.autodiff.custom_function_models import FunctionMLP
from tests.capture.test_stamping import hf_bert, hf_llama, ids
from thunderviz.capture import recorder, stamping
from thunderviz.core.proxies import TensorProxy
from thunderviz.models import GPT, GPTConfig

_OURS = "/thunderviz/"
_USER_LEVEL = ("/thunderviz/models.py",)  # the example models are a user's program


def _calls_from_our_frames(monkeypatch, fn, *args) -> list[tuple[str, int, str]]:
    """(file, line, torch function) of each call the function mode saw whose first caller
    outside torch is thunderviz's code (the example models aside)."""
    seen: list[tuple[str, int, str]] = []
    handler = recorder._FunctionMode.__torch_function__

    def watching(self, func, types, args=(), kwargs=None):
        frame = sys._getframe(1)
        while frame is not None and "/torch/" in frame.f_code.co_filename:
            frame = frame.f_back
        if (
            frame is not None
            and _OURS in frame.f_code.co_filename
            and not frame.f_code.co_filename.endswith(_USER_LEVEL)
            and func is not torch._C._set_grad_enabled  # no_grad around a Function's forward
        ):
            where = frame.f_code.co_filename.split(_OURS)[-1]
            seen.append((where, frame.f_lineno, getattr(func, "__name__", "")))
        return handler(self, func, types, args, kwargs)

    monkeypatch.setattr(recorder._FunctionMode, "__torch_function__", watching)
    torch.manual_seed(0)
    out = tv.jit(fn)(*args)
    (out if isinstance(out, torch.Tensor) else out[0]).sum().backward()
    return seen


def _gpt(dropout: float) -> torch.nn.Module:
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=100, block_size=16, n_layer=5, n_head=4, d_model=32, dropout=dropout
    )
    return GPT(config).train(dropout > 0)


@pytest.mark.parametrize(
    "make, args",
    [
        (lambda: _gpt(0.0), lambda: (ids(), ids())),  # stamped blocks, with their values
        (lambda: _gpt(0.1), lambda: (ids(), ids())),  # and dropout's in-place draws
        (hf_llama, lambda: (ids(),)),
        (lambda: hf_bert(True), lambda: (ids(),)),
        (FunctionMLP, lambda: (torch.randn(4, 6, requires_grad=True),)),  # Function.apply
    ],
    ids=["gpt", "gpt_dropout", "llama", "bert_train", "custom_function"],
)
def test_no_call_from_our_own_frames_reaches_the_recorder(monkeypatch, make, args):
    assert _calls_from_our_frames(monkeypatch, make(), *args()) == []


def test_the_census_sees_our_frames(monkeypatch):
    # the check above can fail: thunderviz's code reading a tensor's metadata with torch
    # functions on (here `_tensor_sig`, called before a block's bookkeeping turns them off)
    # is seen
    current = stamping.current_values

    def reading(block, reads):
        weight = next(block.parameters())
        stamping._tensor_sig(weight, TensorProxy.like("w", weight), 0)
        return current(block, reads)

    monkeypatch.setattr(stamping, "current_values", reading)
    seen = _calls_from_our_frames(monkeypatch, _gpt(0.0), ids(), ids())
    assert "capture/stamping.py" in {path for path, _, _ in seen}
