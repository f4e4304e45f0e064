"""Hosting services: connect, declare, open the store, start, wait for stop, shut down in order.

Shutdown order (each step bounded by the shared shutdown timeout):
    stop event set -> each service stops taking work and finishes in flight (reverse start order)
    -> micro registrations withdrawn -> NATS drained (pending publishes flushed) -> store closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.micro.service import Service as MicroService

from evertune.errors import Unavailable
from evertune.infra.bus import connect, declare, load_definitions
from evertune.infra.logging import get_logger
from evertune.infra.runtime.micro import register
from evertune.infra.runtime.service import Service, ServiceContext
from evertune.infra.settings import NatsAuth, SharedSettings
from evertune.infra.store import Store, migrate, open_store

log = get_logger("evertune.host")

ReadyCallback = Callable[[Sequence[Service]], None]


async def host_services(
    services: Sequence[Service],
    *,
    shared: SharedSettings,
    nats_url: str,
    stop: asyncio.Event,
    on_ready: ReadyCallback | None = None,
    client_name: str = "evertune",
    auth: NatsAuth | None = None,
    service_auth: Mapping[str, NatsAuth] | None = None,
) -> None:
    """Run `services` until `stop` is set, then shut them down cleanly.

    The host's connection (declaring streams, and every service's unless `service_auth` names it)
    logs in with `auth`, else the shared settings' credentials; a service in `service_auth` gets a
    connection of its own, logged in as its own NATS user (the embedded `evertune up`).

    Startup errors (NATS unreachable, store locked, a port taken) propagate as `EvertuneError`s
    after whatever had started is stopped again.
    """
    timeout_s = shared.connect_timeout_s
    nc = await connect(
        nats_url, name=client_name, connect_timeout_s=timeout_s, auth=auth or shared.nats_auth()
    )
    own: list[Client] = []  #: the services' own connections
    store: Store | None = None
    started: list[tuple[Service, MicroService]] = []
    try:
        js = nc.jetstream()
        report = await declare(js, load_definitions(), replicas=shared.nats_replicas)
        log.info("jetstream declared", created=report.created, updated=report.updated)
        if any(s.needs_store for s in services):
            store = await open_store(shared.store_url, database=shared.clickhouse_database)
            applied = await migrate(store)
            log.info("store ready", url=shared.store_url, migrations_applied=applied)
        ctx = ServiceContext(shared=shared, nc=nc, js=js, store=store)
        for service in services:
            service_ctx, service_nc = ctx, nc
            if service_auth is not None and service.name in service_auth:
                service_nc = await connect(
                    nats_url,
                    name=f"{client_name}-{service.name}",
                    connect_timeout_s=timeout_s,
                    auth=service_auth[service.name],
                )
                own.append(service_nc)
                service_ctx = ServiceContext(
                    shared=shared, nc=service_nc, js=service_nc.jetstream(), store=store
                )
            await service.start(service_ctx)
            started.append((service, await register(service_nc, service)))
            log.info("service running", service=service.name, listen=service.listen())
        if on_ready is not None:
            on_ready(services)
        await stop.wait()
        log.info("stopping", services=[s.name for s, _ in started])
    finally:
        for service, micro in reversed(started):
            await service.stop(shared.shutdown_timeout_s)
            with contextlib.suppress(NatsError):  # stopping: its subscriptions end with the connection
                await micro.stop()
        for service in services:  # started but never registered, or failed half way
            if service.state in ("starting", "running", "failed"):
                await service.stop(shared.shutdown_timeout_s)
        for client in (*reversed(own), nc):
            try:
                await asyncio.wait_for(client.drain(), shared.shutdown_timeout_s)
            except (NatsError, TimeoutError) as err:  # what it still held to publish may be lost
                log.warning("a NATS connection did not drain", error=repr(err))
        if store is not None:
            await store.close()


@contextlib.asynccontextmanager
async def hosted(
    services: Sequence[Service],
    *,
    shared: SharedSettings,
    nats_url: str,
    client_name: str = "evertune",
    start_timeout_s: float | None = None,
) -> AsyncIterator[None]:
    """`host_services` in a task of this process, for embedded stacks, benchmarks and tests.

    Entered once every service runs; a startup error raises here, as do a stop while starting and
    no start within `start_timeout_s` (None: no limit). On exit the services are shut down as
    `host_services` does; a shutdown error raises unless the body already raised."""
    stop, ready = asyncio.Event(), asyncio.Event()
    hosting = asyncio.create_task(
        host_services(
            services,
            shared=shared,
            nats_url=nats_url,
            stop=stop,
            on_ready=lambda _: ready.set(),
            client_name=client_name,
        )
    )
    try:
        waiting = asyncio.create_task(ready.wait())
        try:
            first = asyncio.FIRST_COMPLETED
            await asyncio.wait({waiting, hosting}, timeout=start_timeout_s, return_when=first)
        finally:
            waiting.cancel()
        if hosting.done():
            hosting.result()  # raises the startup error
            raise Unavailable("the services stopped while starting")
        if not ready.is_set():
            raise Unavailable(f"the services did not start within {start_timeout_s:g} s")
        yield
    except BaseException:
        stop.set()
        try:
            await hosting
        except Exception as err:  # the error raised on is the first; this one is logged
            log.warning("hosting the services failed while stopping", error=repr(err))
        raise
    stop.set()
    await hosting
