"""The metrics tests' Prometheus registry and its endpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

pytest.importorskip("prometheus_client")  # the extra: persched[metrics]

from prometheus_client import CollectorRegistry, start_http_server

from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def endpoint(registry: CollectorRegistry) -> Iterator[str]:
    """A Prometheus endpoint for `registry` on a free local port."""
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)
