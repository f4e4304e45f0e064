"""The fake engine (`tests/fake_engine.py`) in its own process, listing `fake` and `fake-2` and
answering any model (the gateway tests send their endpoints' names), shared by the session."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from evertune.infra.nats_server import free_port
from tests.fake_engine import SCRIPT as FAKE_ENGINE


def serve() -> Iterator[str]:
    """Start one fake server process on a free port; yield its URL; stop it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            sys.executable,
            str(FAKE_ENGINE),
            "--port",
            str(port),
            "--model",
            "fake",
            "--model",
            "fake-2",
            "--any-model",
        ]
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the fake engine did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def fake_url() -> Iterator[str]:
    """Base URL of the fake server (a separate process, so its timing is its own)."""
    yield from serve()


@pytest.fixture(scope="session")
def second_fake_url() -> Iterator[str]:
    """A second fake server of its own (two replicas of one config, for spread replays)."""
    yield from serve()
