"""Hugging Face census: `thunderviz.jit` training against eager on transformers' model
architectures, each from a tiny config (no weights downloaded).

For every architecture in `ARCHITECTURES` (causal LMs, masked LMs, encoder-decoders, image
classifiers), a model is built from a tiny config of its type, copied, and trained two steps
in eager and through `jit` (dropout as configured, the same seeds on both sides): the loss
and every parameter's gradient are compared at each step. An architecture is

* pass: loss and gradients agree (float64: 1e-9 on the loss, 1e-7 on gradients);
* wrong: they do not;
* error: thunderviz raised;
* setup: eager itself failed on this tiny config (nothing to compare with; not counted).

Mixture-of-experts models run `torch._grouped_mm`, which takes no float64: those run in
float32 (`FLOAT32`). Run:

    .venv/bin/python -m benchmarks.hf_census                 # every architecture
    .venv/bin/python -m benchmarks.hf_census --only llama,t5 -v
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings
from collections import Counter
from typing import Any

import torch
import transformers

import thunderviz as tv

ARCHITECTURES = {
    "causal": (
        "gpt2 gpt_neo gptj opt bloom llama mistral qwen2 qwen3 gemma gemma2 gemma3_text phi "
        "stablelm starcoder2 olmo olmo2 cohere granite mixtral qwen2_moe gpt_neox codegen xglm "
        "biogpt gpt_bigcode persimmon"
    ).split(),
    "masked": (
        "bert roberta albert electra distilbert deberta deberta-v2 mpnet xlm-roberta convbert "
        "mobilebert camembert ernie megatron-bert nystromformer rembert roformer"
    ).split(),
    "seq2seq": "t5 bart mbart pegasus blenderbot m2m_100 led".split(),
    "vision": "vit convnext resnet beit dinov2 regnet".split(),
}
FLOAT32 = {"mixtral", "qwen2_moe", "xglm"}  # grouped_mm (MoE); xglm's mask overflows float64
# The one tiny config every architecture gets, each taking the fields it has
TINY = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    intermediate_size=48,
    vocab_size=99,
    max_position_embeddings=64,
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_inner=48,
    n_positions=64,
    d_model=32,
    d_ff=48,
    d_kv=8,
    num_layers=2,
    num_heads=4,
    num_decoder_layers=2,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=48,
    decoder_ffn_dim=48,
    ffn_dim=48,
    embedding_size=32,
    embed_dim=32,
    rotary_dim=4,
    num_local_experts=4,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    shared_expert_intermediate_size=16,
    sliding_window=16,
    image_size=32,
    patch_size=8,
    num_channels=3,
    hidden_sizes=[8, 16],
    depths=[1, 1],
    num_labels=3,
)
HEADS = {
    "causal": transformers.AutoModelForCausalLM,
    "masked": transformers.AutoModelForMaskedLM,
    "seq2seq": transformers.AutoModelForSeq2SeqLM,
    "vision": transformers.AutoModelForImageClassification,
}


def tiny_config(model_type: str) -> Any:
    config = transformers.AutoConfig.for_model(model_type)
    for key, value in TINY.items():
        if hasattr(config, key):
            try:
                setattr(config, key, value)
            except (AttributeError, TypeError, ValueError):  # a derived, read-only field
                pass
    if getattr(config, "pad_token_id", 0) is None:
        config.pad_token_id = 0
    return config


def batch(kind: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    if kind == "vision":
        pixels = torch.randn(2, 3, 32, 32, generator=gen, dtype=dtype)
        return {"pixel_values": pixels, "labels": torch.tensor([0, 2])}
    ids = torch.randint(1, 99, (2, 12), generator=gen)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    if kind == "seq2seq":
        inputs["decoder_input_ids"] = torch.randint(1, 99, (2, 7), generator=gen)
        inputs["labels"] = inputs["decoder_input_ids"].clone()
    return inputs


def census_architecture(kind: str, model_type: str) -> tuple[str, str]:
    """(status, detail) for one architecture."""
    dtype = torch.float32 if model_type in FLOAT32 else torch.float64
    loss_tol, grad_tol = (1e-9, 1e-7) if dtype == torch.float64 else (1e-4, 1e-3)
    try:
        torch.manual_seed(0)
        eager = HEADS[kind].from_config(tiny_config(model_type)).to(dtype).train()
        ours = copy.deepcopy(eager)
        inputs = batch(kind, dtype)
        torch.manual_seed(99)
        copy.deepcopy(eager)(**inputs).loss.backward()  # eager runs this config at all
    except Exception as e:  # noqa: BLE001 - reported, not counted
        return "setup", f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    try:
        jitted = tv.jit(ours)
        for step in range(2):
            torch.manual_seed(100 + step)
            want = eager(**inputs).loss
            want.backward()
            torch.manual_seed(100 + step)
            got = jitted(**inputs).loss
            got.backward()
            if not torch.allclose(got, want, rtol=loss_tol, atol=loss_tol, equal_nan=True):
                return "wrong", f"step {step}: loss {got.item()} against eager's {want.item()}"
            for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
                if p.grad is None and q.grad is None:
                    continue
                if (p.grad is None) != (q.grad is None) or not torch.allclose(
                    q.grad, p.grad, rtol=grad_tol, atol=grad_tol * 1e-2, equal_nan=True
                ):
                    return "wrong", f"step {step}: the gradient of {name}"
    except Exception as e:  # noqa: BLE001 - the census reports it and goes on
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    return "pass", str(dtype).removeprefix("torch.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model types")
    parser.add_argument("-v", action="store_true", help="list passes too")
    ns = parser.parse_args()
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    only = set(ns.only.split(",")) if ns.only else None
    start, counts = time.perf_counter(), Counter()
    for kind, types in ARCHITECTURES.items():
        for model_type in types:
            if only and model_type not in only:
                continue
            status, detail = census_architecture(kind, model_type)
            counts[status] += 1
            if ns.v or status != "pass":
                print(f"  {status:6} {kind:8} {model_type:15} {detail}", flush=True)
    counted = sum(counts.values()) - counts["setup"]
    print(
        f"Hugging Face census (transformers {transformers.__version__}): {counts['pass']} of "
        f"{counted} architectures train like eager (wrong {counts['wrong']}, error "
        f"{counts['error']}; {counts['setup']} not run: eager fails on the tiny config) "
        f"[{time.perf_counter() - start:.0f} s]"
    )


if __name__ == "__main__":
    main()
