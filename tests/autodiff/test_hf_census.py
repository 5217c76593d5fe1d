"""A slice of `benchmarks/hf_census.py` (every architecture takes a minute: run it by hand):
architectures of each kind, trained two steps through jit against eager from tiny configs.
LED is here for its Longformer attention, which fills a buffer slice by slice and so once
lost its query and key gradients; Mixtral for its routed experts (float32)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from benchmarks import hf_census as census  # noqa: E402

SLICE = [
    ("causal", "llama"),
    ("causal", "mixtral"),
    ("masked", "deberta-v2"),
    ("seq2seq", "led"),
    ("seq2seq", "bart"),
    ("vision", "vit"),
]


@pytest.mark.parametrize(("kind", "model_type"), SLICE, ids=[t for _, t in SLICE])
def test_architecture_trains_like_eager(kind, model_type):
    status, detail = census.census_architecture(kind, model_type)
    assert status == "pass", detail
