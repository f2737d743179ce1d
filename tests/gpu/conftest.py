"""GPU tests: run alone with ``pytest tests/gpu``; every test here is skipped without a GPU.

Availability is decided once, with the reason shown in the skip message. Nothing here imports
CuPy at collection time; tests get it from the ``cp`` fixture.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from replayverify.gpu import available, unavailable_reason
from replayverify.gpu.backend import require_cupy

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if HERE in Path(item.path).parents]
    for item in mine:
        item.add_marker(pytest.mark.gpu)
    if mine and not available():
        skip = pytest.mark.skip(reason=f"GPU backend unavailable: {unavailable_reason()}")
        for item in mine:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cp() -> ModuleType:
    """The CuPy module (the tests are skipped before this runs when there is no GPU)."""
    return require_cupy()
