"""One spawn of 2 gloo ranks runs the checks of every test module here (starting ranks and
importing torch in them is the slow part); each module reads its share of the results."""

from __future__ import annotations

import pytest

from tests.distributed import rank_checks
from thunderviz.distributed import launch


@pytest.fixture(scope="session")
def all_ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ranks")
    return launch(rank_checks.run_all, str(folder), world_size=2, timeout=60, run_timeout=150)
