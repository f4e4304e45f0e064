"""The one lifecycle every evertune service follows.

    start(ctx)  -> the service serves (servers bound, consumers fetching); returns when ready
    stop(t)     -> stop taking work (the `stopping` event), finish in-flight work within t seconds,
                   cancel what is left, release resources

A service spawns its long-running loops with `spawn`; a loop watches `self.stopping` (consumers
pass it to `DurableConsumer.run`) and returns once its in-flight work is done. Nothing polls.

Every service has a Prometheus registry of its own (`metrics_registry`); `serve_metrics` (called
from `on_start`) serves it on a port of its own, which `listen()` reports as "metrics" and
`metrics_url()` as a URL; `stop` closes that server after `on_stop`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.infra.logging import get_logger
from evertune.infra.runtime.metrics import MetricsServer, Refresh, new_registry
from evertune.infra.runtime.tasks import cancel_and_wait
from evertune.infra.runtime.tls import ServerTls
from evertune.infra.settings import SharedSettings
from evertune.infra.store import Store

State = Literal["created", "starting", "running", "stopping", "stopped", "failed"]


@dataclass(frozen=True)
class ServiceContext:
    """What the host hands every service at start."""

    shared: SharedSettings  #: settings common to all services
    nc: Client  #: the NATS connection (reconnects on its own)
    js: JetStreamContext  #: JetStream on that connection
    store: Store | None  #: the ClickHouse store, for services with `needs_store`


class Service:
    """Base of every service. Subclasses set `name`, `description` and override the hooks."""

    name: ClassVar[str]  #: micro-service name, e.g. "sla-monitor"
    description: ClassVar[str]  #: one line, shown by `evertune status`
    needs_store: ClassVar[bool] = False  #: the host opens and migrates the store for it

    def __init__(self) -> None:
        self.state: State = "created"
        self.stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.log = get_logger(f"evertune.{self.name}")
        self.metrics_registry = new_registry()  #: this service's Prometheus registry
        self.metrics_server: MetricsServer | None = None  #: serves it (None: not served, or not yet)

    # --- hooks -------------------------------------------------------------------------------
    async def on_start(self, ctx: ServiceContext) -> None:
        """Bind servers and spawn loops. Raise to fail the start."""

    async def on_stop(self) -> None:
        """Release what `on_start` took (after loops have finished or been cancelled)."""

    def listen(self) -> dict[str, str]:
        """Addresses this service serves on, e.g. {"grpc": "127.0.0.1:50051", "metrics": ...}."""
        server = self.metrics_server
        return {"metrics": f"{server.host}:{server.port}"} if server is not None and server.port else {}

    def metrics_url(self) -> str:
        """Where Prometheus scrapes this service ("" = its metrics are not served)."""
        server = self.metrics_server
        return server.url if server is not None and server.port else ""

    async def serve_metrics(
        self, ctx: ServiceContext, *, host: str, port: int, refresh: Refresh | None = None
    ) -> None:
        """Serve `metrics_registry` on `host:port` (0: a free port; -1: not at all), over TLS when
        the shared settings have the metrics ports' files. A port that is taken, or a TLS file
        that does not load, fails the start with one line."""
        if port < 0:
            return
        tls = ServerTls.of(ctx.shared.metrics_tls(), "EVERTUNE_METRICS_")
        server = MetricsServer(
            self.metrics_registry,
            host=host,
            port=port,
            refresh=refresh,
            ssl_context=tls.ssl_context() if tls is not None else None,
        )
        await server.start()
        self.metrics_server = server
        self.log.info("metrics listening", url=server.url)

    def details(self) -> dict[str, Any]:
        """Service-specific figures for `evertune status` (counters, queue depths)."""
        return {}

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop] | None:
        """The event loop this service runs on when it has a process of its own (`evertune run`);
        None: asyncio's own. Services that host others' code in their loop keep asyncio's."""
        return None

    # --- lifecycle ---------------------------------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run a loop for the life of the service; a loop that crashes is logged, not swallowed."""
        task = asyncio.create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._loop_done)

    def _loop_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.state = "failed"
            self.log.error("service loop crashed", loop=task.get_name(), error=repr(task.exception()))

    async def start(self, ctx: ServiceContext) -> None:
        self.state = "starting"
        try:
            await self.on_start(ctx)
        except BaseException:
            self.state = "failed"
            raise
        self.state = "running"

    async def stop(self, timeout_s: float) -> None:
        """Stop taking work, give in-flight work `timeout_s` to finish, then cancel the rest."""
        if self.state in ("stopping", "stopped"):
            return
        self.state = "stopping"
        self.stopping.set()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            if pending:
                self.log.warning("in-flight work cancelled at shutdown", loops=len(pending))
                await cancel_and_wait(pending, grace_s=timeout_s)  # (their cleanup gets timeout_s)
        try:
            await self.on_stop()
        finally:
            if self.metrics_server is not None:
                await self.metrics_server.stop()
        self.state = "stopped"

    def status(self) -> dict[str, Any]:
        """What `evertune status` shows for this instance."""
        return {"state": self.state, "listen": self.listen(), **self.details()}
