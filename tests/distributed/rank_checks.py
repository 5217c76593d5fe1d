"""Everything the ranks run for the tests of this folder, in one call per rank."""

from __future__ import annotations

from tests.distributed import collective_checks, ddp_checks, debug_checks


def run_all(rank: int, world_size: int, folder: str) -> dict[str, object]:
    return {
        "collectives": collective_checks.run_all(rank, world_size),
        "ddp": ddp_checks.run_all(rank, world_size),
        "sessions": debug_checks.save_sessions(rank, world_size, folder),
    }
