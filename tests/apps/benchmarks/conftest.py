"""The fake engine of the replay tests, for the benchmarks' measuring parts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.domain.replay.conftest import serve


@pytest.fixture(scope="session")
def fake_url() -> Iterator[str]:
    """Base URL of the fake server (a separate process, answering in about 20 ms)."""
    yield from serve()
