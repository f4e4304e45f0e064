from __future__ import annotations

import pytest

from evertune.infra.nats_server import free_port


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    return free_port()
