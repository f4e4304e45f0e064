"""Prometheus `/metrics` for services: one registry per service, served by aiohttp.

Each service builds its own `CollectorRegistry` (never the process-global one: `evertune up` runs
every service in one process, and two services' metrics must not collide or leak into each other's
scrape). A service that already runs an aiohttp app adds `metrics_handler(registry)` as a route; a
service without one starts a `MetricsServer` (port 0 picks a free one).

Figures a service already keeps (counters in its stats, live windows) are best exported by a
collector that reads them at scrape time (`prometheus_client.registry.Collector`), so there is one
source of truth and nothing to keep in step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from evertune.errors import Unavailable

#: Path every evertune service serves its metrics on.
METRICS_PATH = "/metrics"

#: An aiohttp request handler.
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_registry() -> CollectorRegistry:
    """A registry of one service (not the process-global default)."""
    return CollectorRegistry(auto_describe=True)


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text exposition format."""
    return generate_latest(registry)


def metrics_handler(registry: CollectorRegistry) -> Handler:
    """An aiohttp GET handler answering the registry's exposition."""

    async def handle(_: web.Request) -> web.Response:
        return web.Response(body=exposition(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return handle


class MetricsServer:
    """A small aiohttp server answering `GET /metrics` with one registry."""

    def __init__(self, registry: CollectorRegistry, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = registry
        self.host = host
        self.port = port  #: the bound port once started (the chosen one when asked for 0)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """`http://host:port/metrics` (after start)."""
        return f"http://{self.host}:{self.port}{METRICS_PATH}"

    async def start(self) -> int:
        """Bind and serve; returns the port. A port in use raises a one-line `Unavailable`."""
        app = web.Application()
        app.router.add_get(METRICS_PATH, metrics_handler(self.registry))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_port=False)
        try:
            await site.start()
        except OSError as err:
            await runner.cleanup()
            raise Unavailable(
                f"metrics server cannot listen on {self.host}:{self.port}: {err.strerror or err}"
            ) from None
        server = site._server
        sockets = list(getattr(server, "sockets", None) or [])
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._runner = runner
        return self.port

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
