"""Per-rank sessions saved and compared (the desync finder), and a failing rank, on 2 real
gloo ranks."""

from __future__ import annotations

import multiprocessing

import pytest

from tests.distributed import debug_checks as checks
from thunderviz.distributed import (
    RankError,
    compare,
    format_side_by_side,
    launch,
    side_by_side,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def saved(all_ranks):
    """Each rank's results of these checks (the ranks ran them in conftest's one spawn)."""
    return [r["sessions"] for r in all_ranks]


def _paths(saved, name):
    return [saved[0][name], saved[1][name]]


def test_ranks_that_agree_have_no_divergence(saved):
    assert compare(_paths(saved, "agreeing")) is None


def test_a_loss_scaled_on_one_rank_is_found_at_the_scaling(saved):
    found = compare(_paths(saved, "scaled_loss"))
    assert found is not None
    assert found.trace == "forward" and found.ranks == (0, 1)
    assert checks.SCALED_LOSS_LINE in found.source
    assert found.op == "torch.Tensor.mul"


def test_unsynchronized_noise_on_a_replicated_value_is_found_where_it_is_drawn(saved):
    found = compare(_paths(saved, "noise"))
    assert found is not None
    assert checks.NOISE_LINE in found.source
    assert "randn" in found.op and found.max_difference > 0
    # the generator, seeded per rank, is an input of the draw (capture/generators.py)
    assert found.reason.startswith("drawn from a generator in another state on each rank")


def test_a_replicated_parameter_that_differs_is_found_at_the_input(saved):
    assert compare(_paths(saved, "perturbed_parameter")) is None  # w not declared replicated
    found = compare(_paths(saved, "perturbed_parameter"), replicated=["w"])
    assert found is not None and found.tensor == "w" and found.ranks == (0, 1)
    assert found.max_difference > 0


def test_ddp_gradients_after_the_all_reduce_agree_and_a_drifted_replica_is_found(saved):
    ddp = [saved[0]["ddp"], saved[1]["ddp"]]
    assert "DDP bucket 0" in ddp[0]["backward"]
    replicated = ddp[0]["replicated"]
    assert "module_fc2_weight" in replicated
    # uneven data: local gradients differ; after DDP's all-reduce they must not
    assert compare([d["ddp"] for d in ddp], replicated=replicated) is None
    found = compare([d["ddp_drifted"] for d in ddp], replicated=replicated)
    assert found is not None and found.tensor == "module_fc2_weight" and found.ranks == (0, 1)
    assert found.max_difference > 0  # of their statistics (max, norm, ...): not per element


def test_side_by_side_norms_differ_before_ddps_all_reduce_and_agree_after(saved):
    rows = side_by_side([saved[0]["ddp"]["ddp"], saved[1]["ddp"]["ddp"]])
    collectives = [i for i, r in enumerate(rows) if r.collective]
    assert collectives, "DDP's all-reduces are marked"
    waited = [rows[i + 1] for i in collectives if i + 1 < len(rows)]
    assert waited and all(r.op.endswith("wait_tensor") and r.spread == 0 for r in waited)
    assert any(r.spread > 0 for r in rows[: collectives[0]])  # local gradients: per-rank data
    table = format_side_by_side(rows)
    assert "<-> torch.ops._c10d_functional.all_reduce" in table and "rank 1" in table


def test_a_rank_that_raises_mid_trace_ends_the_others_with_its_error():
    with pytest.raises(RankError, match="planted failure on rank 1") as info:
        launch(checks.raises_mid_trace, world_size=2, timeout=60, run_timeout=120)
    assert info.value.rank == 1
    assert multiprocessing.active_children() == []  # rank 0 was ended, not left waiting
