"""Fixtures shared by the race tests of this folder."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.race_jobs import Seam


@pytest.fixture
def seams() -> Iterator[list[Seam]]:
    """Seams to release at teardown (before the schedulers are shut down)."""
    made: list[Seam] = []
    yield made
    for seam in made:
        seam.release()
