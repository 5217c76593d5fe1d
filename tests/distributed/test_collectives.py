"""Collectives in traces, their VJPs, and a tensor-parallel MLP, on 2 real gloo ranks."""

from __future__ import annotations

import pytest
import torch

from tests.distributed import collective_checks as checks

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def ranks(all_ranks):
    """Each rank's results of these checks (the ranks ran them in conftest's one spawn)."""
    return [r["collectives"] for r in all_ranks]


def test_functional_collectives_print_runnable_calls_with_their_group(ranks):
    text = ranks[0]["functional_trace"]
    assert (
        "t1 = torch.ops._c10d_functional.all_reduce(t0, 'sum', '0')" in text
        or "torch.ops._c10d_functional.all_reduce(" in text
    )
    assert "process group '0' (ranks 0, 1)" in text
    assert "torch.ops._c10d_functional.wait_tensor(" in text


def test_in_place_calls_are_recorded_as_functional_collectives(ranks):
    text = ranks[1]["in_place_trace"]
    for op in ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor"):
        assert f"torch.ops._c10d_functional.{op}(" in text, op
    assert "broadcast from group rank 0 over process group '0' (ranks 0, 1)" in text


def test_tensor_parallel_mlp_trains_as_one_process(ranks):
    reference = checks.train_single_process()
    half = checks.HIDDEN // 2
    for rank, result in enumerate(ranks):
        tp = result["tensor_parallel"]
        torch.testing.assert_close(tp["losses"], reference["losses"], rtol=1e-5, atol=1e-6)
        shard = slice(rank * half, (rank + 1) * half)
        want = reference["state"]
        torch.testing.assert_close(tp["state"]["w1"], want["w1"][shard], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(tp["state"]["b1"], want["b1"][shard], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(tp["state"]["w2"], want["w2"][:, shard], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(tp["state"]["b2"], want["b2"], rtol=1e-5, atol=1e-6)
        # the all-reduce's VJP is an all-reduce of the cotangent, in the backward trace
        assert "torch.ops._c10d_functional.all_reduce(" in tp["backward"]
        assert "# all_reduce sum over process group '0' (ranks 0, 1)" in tp["backward"]


def test_what_has_no_gradient_or_no_record_is_refused_by_name_and_line(ranks):
    messages = ranks[0]["refusals"]
    assert "_c10d_functional.all_reduce.default with reduce_op='max'" in messages["max"]
    assert 'fc.all_reduce(x * 2.0, "max", dist.group.WORLD)' in messages["max"]
    assert "c10d.reduce_" in messages["legacy"] and "dist.reduce(y, dst=0)" in messages["legacy"]
