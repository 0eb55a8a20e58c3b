"""The suite's own arrangement: the tests of several scheduler processes share one xdist worker.

tests/conftest.py puts them in one ``xdist_group``; pytest-xdist names the group in each node id
(``…@processes``), and its scheduler reads it from there. A pytest release that pytest-xdist
does not follow can drop that suffix without an error (pytest 9.2 with pytest-xdist 3.8): the
tests then run two or three at once, each starving the others of the cores it counts on.
"""

from __future__ import annotations

import os

import pytest


@pytest.mark.xdist_group("processes")  # a member itself, so that a run of this file alone checks too
def test_the_tests_of_processes_form_one_xdist_group(request: pytest.FixtureRequest) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not request.config.getvalue("loadgroup"):
        pytest.skip("not under pytest-xdist --dist loadgroup: every test runs in this one process")
    grouped = {
        item.nodeid: marker.args[0]
        for item in request.session.items
        if (marker := item.get_closest_marker("xdist_group")) is not None
    }
    assert grouped[request.node.nodeid] == "processes"
    lost = [nodeid for nodeid, group in grouped.items() if not nodeid.endswith(f"@{group}")]
    assert not lost, f"{len(lost)} of {len(grouped)} tests of a group are not in it, e.g. {lost[0]}"
