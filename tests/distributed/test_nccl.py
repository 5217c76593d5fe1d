"""The tensor-parallel MLP through thunderviz.jit on 2 GPUs with NCCL (`make test-cuda` on a
machine with two GPUs; skipped elsewhere)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.distributed import collective_checks as checks
from thunderviz.distributed import launch

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        not (
            torch.cuda.is_available()
            and torch.cuda.device_count() >= 2
            and dist.is_nccl_available()
        ),
        reason="needs 2 CUDA GPUs and NCCL",
    ),
]


def test_tensor_parallel_mlp_trains_as_one_process_on_cuda_with_nccl():
    reference = checks.train_single_process()
    ranks = launch(
        checks.train_tensor_parallel_cuda,
        world_size=2,
        backend="nccl",
        timeout=120,
        run_timeout=200,
    )
    half = checks.HIDDEN // 2
    for rank, tp in enumerate(ranks):
        # TF32 and GPU kernels: a looser tolerance than the CPU test's
        torch.testing.assert_close(tp["losses"], reference["losses"], rtol=1e-3, atol=1e-4)
        shard = slice(rank * half, (rank + 1) * half)
        torch.testing.assert_close(
            tp["state"]["w1"], reference["state"]["w1"][shard], rtol=1e-3, atol=1e-4
        )
        torch.testing.assert_close(
            tp["state"]["b2"], reference["state"]["b2"], rtol=1e-3, atol=1e-4
        )
