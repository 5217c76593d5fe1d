"""Capture state is per thread: two threads tracing different models at once each get their
own module paths, ops and values; a thread running its model eagerly meanwhile is untouched."""

from __future__ import annotations

import threading

import torch
from torch import nn

import thunderviz as tv
from thunderviz.core.context import current_builder, pop_builder, push_builder


class Encoder(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.enc(x).sum()


class Decoder(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.dec = nn.ModuleList([nn.Linear(width, width) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.dec:
            x = torch.tanh(layer(x))
        return x.sum()


def _paths(trace: tv.Trace) -> list[str]:
    return [b.module_path for b in trace.bound_symbols]


def test_two_threads_tracing_get_their_own_module_paths():
    torch.manual_seed(0)
    models = {"enc": Encoder(6), "dec": Decoder(5)}
    inputs = {"enc": torch.randn(3, 6), "dec": torch.randn(2, 5)}
    # The reference: each model traced alone, in one thread.
    expected = {k: _paths(tv.trace(models[k], inputs[k])) for k in models}
    assert set(expected["enc"]) >= {"enc.0", "enc.2"} and "dec.2" in expected["dec"]
    results: dict[str, list[tuple[list[str], bool]]] = {k: [] for k in models}
    errors: list[BaseException] = []
    eager_ok: list[bool] = []
    start = threading.Barrier(3)

    def tracer(key: str) -> None:
        try:
            start.wait()
            for _ in range(50):
                trace = tv.trace(models[key], inputs[key])
                value = trace.python_callable()(inputs[key], *models[key].parameters())
                results[key].append((_paths(trace), torch.equal(value, models[key](inputs[key]))))
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    def eager() -> None:
        model, x = Encoder(4), torch.randn(2, 4)
        reference = model(x)
        start.wait()
        eager_ok.extend(torch.equal(model(x), reference) for _ in range(200))

    threads = [threading.Thread(target=tracer, args=(k,)) for k in models]
    threads.append(threading.Thread(target=eager))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for key in models:
        assert len(results[key]) == 50
        wrong = [paths for paths, _ in results[key] if paths != expected[key]]
        assert not wrong, f"{key}: {len(wrong)} of 50 traces with wrong module paths: {wrong[0]}"
        assert all(same for _, same in results[key])
    assert len(eager_ok) == 200 and all(eager_ok)
    assert not torch.nn.modules.module._global_forward_hooks, "hooks are removed afterwards"


def test_trace_builders_are_per_thread():
    """Grad rules build traces by calling symbols under a builder (core/context.py): a builder
    one thread has open must not capture another thread's symbol calls."""
    opened, checked = threading.Event(), threading.Event()
    builder = object()
    seen: list[object] = []

    def building() -> None:
        push_builder(builder)
        opened.set()
        checked.wait()
        seen.append(current_builder())
        pop_builder(builder)

    t = threading.Thread(target=building)
    t.start()
    opened.wait()
    seen.append(current_builder())  # this thread has no builder open
    checked.set()
    t.join()
    assert seen == [None, builder]
    assert current_builder() is None
