from __future__ import annotations

import pytest

from tests.widgets.models import mlp_inputs
from thunderviz.debug import Session


@pytest.fixture(scope="module")
def mlp():
    """(model, x, target) for BlockMLP."""
    return mlp_inputs()


@pytest.fixture(scope="module")
def mlp_session(mlp):
    model, x, target = mlp
    return Session(model, x, target)
