"""thunderviz.jit(DistributedDataParallel(model)) trains as eager DDP, on 2 real gloo ranks."""

from __future__ import annotations

import pytest
import torch

from tests.distributed import ddp_checks as checks

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def ranks(all_ranks):
    """Each rank's results of these checks (the ranks ran them in conftest's one spawn)."""
    return [r["ddp"] for r in all_ranks]


def _same_training(result):
    ref, ours = result["reference"], result["ours"]
    torch.testing.assert_close(ours["losses"], ref["losses"], rtol=1e-6, atol=1e-6)
    for step, (g_ours, g_ref) in enumerate(zip(ours["grads"], ref["grads"], strict=True)):
        assert g_ours.keys() == g_ref.keys(), step
        for name in g_ref:
            torch.testing.assert_close(
                g_ours[name],
                g_ref[name],
                rtol=1e-6,
                atol=1e-6,
                msg=lambda m, n=name, s=step: f"step {s}, {n}: {m}",
            )
    for name, value in ref["state"].items():  # parameters and BatchNorm's running statistics
        torch.testing.assert_close(ours["state"][name], value, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ["buckets", "no_sync", "unused"])
def test_jitted_ddp_trains_as_eager_ddp(ranks, case):
    for rank in ranks:
        _same_training(rank[case])


def test_gradient_all_reduces_are_bucketed_in_the_backward_trace(ranks):
    result = ranks[0]["buckets"]
    # bucket_cap_mb=0.0004 (~420 bytes): fc1.weight (320 bytes) and fc2.weight (1 KiB)
    # cannot share one bucket, so there are several, each where its gradients are ready
    assert result["n_collectives"] >= 3
    assert result["first_collective_before_last_compute"]
    assert (
        "DDP bucket 0" in result["backward"]
        and "process group '0' (ranks 0, 1)" in result["backward"]
    )


def test_no_sync_backward_has_no_all_reduce_and_sync_one_has(ranks):
    result = ranks[1]["no_sync"]
    assert result["ours"]["unsynced_collectives"] == [0] * checks.STEPS
    assert result["n_collectives"] >= 1  # the last backward traced is a synced one


def test_fully_sharded_model_is_refused_with_a_clear_error(ranks):
    message = ranks[0]["fsdp"]
    assert "FSDP (fully_shard)" in message and "DistributedDataParallel" in message


def test_tracing_ddp_forward_itself_is_refused_pointing_to_jit(ranks):
    message = ranks[0]["trace_ddp"]
    assert "c10d.broadcast_" in message and "thunderviz.jit(ddp)" in message


def test_an_unused_parameter_without_find_unused_parameters_is_refused_by_name(ranks):
    message = ranks[1]["unused_without_flag"]
    assert "'spare.weight' received no gradient" in message
    assert "find_unused_parameters=True" in message


def test_a_communication_hook_is_refused_not_ignored(ranks):
    assert "register_comm_hook" in ranks[0]["comm_hook"]
