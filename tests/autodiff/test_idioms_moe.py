"""Mixture-of-experts: `aten._grouped_mm` against per-group matrix products differentiated
by torch.autograd, and HF Mixtral (tiny config) trained through thunderviz.jit like eager,
with the routing (tokens per expert) changing from step to step."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv
from tests.autodiff.idioms_training import train_like_eager

OFFS = torch.tensor([3, 3, 7, 12], dtype=torch.int32)  # group 1 is empty


def _bounds():
    starts = [0, *OFFS.tolist()[:-1]]
    return list(zip(starts, OFFS.tolist(), strict=True))


def _rows_split(a, b):  # a (M, K) rows by group, b (G, K, N)
    return torch.cat([a[s:e] @ b[g] for g, (s, e) in enumerate(_bounds())])


def _inner_split(a, b):  # a (M, K), b (K, N), K by group -> (G, M, N)
    return torch.stack([a[:, s:e] @ b[s:e] for s, e in _bounds()])


def _cols_split(a, b):  # a (G, M, K), b (K, N) columns by group -> (M, N)
    return torch.cat([a[g] @ b[:, s:e] for g, (s, e) in enumerate(_bounds())], dim=1)


LAYOUTS = {  # (inputs, per-group reference)
    "2d_3d": (lambda: (torch.randn(12, 8), torch.randn(4, 8, 4)), _rows_split),
    "2d_2d": (lambda: (torch.randn(4, 12), torch.randn(12, 8)), _inner_split),
    "3d_2d": (lambda: (torch.randn(4, 4, 8), torch.randn(8, 12)), _cols_split),
    "3d_3d": (lambda: (torch.randn(4, 4, 8), torch.randn(4, 8, 4)), torch.bmm),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_grouped_mm_gradients_match_per_group_products(layout):
    make, reference = LAYOUTS[layout]
    torch.manual_seed(0)
    a, b = make()
    offs = None if layout == "3d_3d" else OFFS

    def fn(a, b):
        return torch._grouped_mm(a, b, offs=offs)

    ref_a, ref_b = a.clone().requires_grad_(), b.clone().requires_grad_()
    ref = reference(ref_a, ref_b)
    ct = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, (ref_a, ref_b), ct)
    out, grads = tv.vjp(fn)((a, b), (ct,))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _mixtral(experts: str):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.MixtralConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(config)
    model.set_experts_implementation(experts)
    return model


def _tokens_per_expert(model, batches) -> list[list[int]]:
    """The first layer's routing for each batch, as eager computes it."""
    counts = []
    hook = model.model.layers[0].mlp.gate.register_forward_hook(
        lambda mod, args, out: counts.append(torch.bincount(out[2].flatten(), minlength=4).tolist())
    )
    with torch.no_grad():
        for ids in batches:
            model(input_ids=ids, use_cache=False)
    hook.remove()
    return counts


def _train_mixtral(experts: str) -> None:
    model = _mixtral(experts)
    torch.manual_seed(1)
    batches = [torch.randint(0, 64, (2, 8)) for _ in range(3)]
    routing = _tokens_per_expert(model, batches)
    assert len({tuple(r) for r in routing}) == 3, routing  # the routing changes every step
    train_like_eager(
        model,
        lambda step: (
            (),
            {"input_ids": batches[step], "labels": batches[step], "use_cache": False},
        ),
        lambda out: out.loss,
    )


def test_mixtral_with_grouped_experts_trains_like_eager_as_routing_changes():
    """F.grouped_mm's backward is split at the same offsets: one trace serves every routing."""
    _train_mixtral("grouped_mm")


def test_mixtral_with_eager_experts_trains_like_eager_as_routing_changes():
    """Each expert's token count is a size the trace specialised on: jit's guards see it
    change and retrace."""
    _train_mixtral("eager")
