"""The loop's serving half in this process: a fresh NATS, a fresh database, and the gateway, the
profiler and the deployer hosted as `evertune up` hosts them (the benchmarks of rollouts and the
reliability tests of the loop drive it from outside, through gRPC, HTTP and NATS).

The caller passes each service's settings (its own timings: short canary steps, fast flushes);
`loop_stack` adds what must be fresh per run: the NATS server under `folder`, the database, the
data dir. On exit the services stop in order, the database is dropped where the store is shared,
and NATS is stopped by its pid.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from evertune.deployer import DeployerService, DeployerSettings
from evertune.deployer.state import State
from evertune.gateway import GatewayService, GatewaySettings
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime.host import hosted
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import open_store
from evertune.profiler import ProfilerService, ProfilerSettings


@dataclass
class LoopStack:
    """A running stack (see the module doc)."""

    nats: EmbeddedNats  #: its own nats-server
    gateway: GatewayService  #: the OpenAI-compatible proxy (`gateway_url`)
    profiler: ProfilerService  #: the telemetry sink into the store, and profiles
    deployer: DeployerService  #: endpoints, rollouts (`deployer.server.address` for gRPC)
    shared: SharedSettings  #: what the services share: data dir, store URL and database
    database: str  #: this run's database

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.port}"

    @property
    def state(self) -> State:
        """The deployer's KV state, read through the deployer's own connection."""
        assert self.deployer.work is not None, "the deployer is not running"
        return self.deployer.work.state


@contextlib.asynccontextmanager
async def loop_stack(
    folder: Path,
    *,
    gateway: GatewaySettings,
    profiler: ProfilerSettings,
    deployer: DeployerSettings,
    store_url: str | None = None,
    name: str = "evertune-harness",
    start_timeout_s: float = 60.0,
) -> AsyncIterator[LoopStack]:
    """Host the stack under `folder` (see the module doc). `store_url`: a store to use, with a
    fresh database that is dropped afterwards (a process holds one chDB folder at most); None: a
    chDB folder under `folder`. `name` prefixes the database and names the NATS client."""
    nats = EmbeddedNats(folder / "nats")
    await nats.start()
    database = f"{name.replace('-', '_')}_{uuid.uuid4().hex[:10]}"
    store = {} if store_url is None else {"clickhouse_url": store_url}
    shared = load_settings(SharedSettings, data_dir=folder / "data", clickhouse_database=database, **store)
    services = LoopStack(
        nats=nats,
        gateway=GatewayService(gateway),
        profiler=ProfilerService(profiler),
        deployer=DeployerService(deployer),
        shared=shared,
        database=database,
    )
    try:
        async with hosted(
            [services.profiler, services.deployer, services.gateway],
            shared=shared,
            nats_url=nats.url,
            client_name=name,
            start_timeout_s=start_timeout_s,
        ):
            yield services
    finally:
        try:
            if store_url is not None:
                dropping = await open_store(store_url, database=database)
                try:
                    await dropping.command(f"DROP DATABASE IF EXISTS `{database}`")
                finally:
                    await dropping.close()
        finally:
            await nats.stop()
