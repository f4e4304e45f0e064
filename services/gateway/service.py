"""The gateway service: the OpenAI-compatible streaming proxy in front of an endpoint's deployments.

At start it loads the prefix-hash tokenizer, reads the `routes` KV bucket (then keeps watching it),
starts the telemetry publisher and binds the HTTP server, which also answers Prometheus' `GET
/metrics` (`metrics.py`; every finished request is counted as its record goes to the publisher).
At stop the HTTP server stops taking requests and lets in-flight ones finish, then the publisher
flushes (to NATS or the spool).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from aiohttp import web
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.domain.model import ensure_model
from evertune.domain.model.chat import ChatFormat
from evertune.errors import EvertuneError, SettingsError, Unavailable
from evertune.gateway.chat_formats import ChatFormats
from evertune.gateway.metrics import gateway_metrics
from evertune.gateway.proxy import Proxy
from evertune.gateway.publisher import HEADER_ROOM, Pending, Publisher, Spool
from evertune.gateway.routing import RouteBook
from evertune.gateway.settings import DEV_PREFIX_SECRET, GatewaySettings
from evertune.gateway.stats import GatewayStats
from evertune.gateway.wiring import wiring
from evertune.infra.bus import KvFollower, publish
from evertune.infra.bus.wiring import Delivery, handler_of
from evertune.infra.runtime import Service, ServiceContext
from evertune.infra.runtime.auth import load_tokens
from evertune.infra.runtime.metrics import METRICS_PATH, FunctionCollector, metrics_handler
from evertune.infra.runtime.tls import Listener, ServerTls, check_exposure, tls_mode
from evertune.v1 import telemetry_pb2


class GatewayService(Service):
    name: ClassVar[str] = "gateway"
    description: ClassVar[str] = "OpenAI-compatible streaming proxy; client-observed timing; route weights"

    def __init__(self, settings: GatewaySettings) -> None:
        super().__init__()
        self.settings = settings
        self.keys = load_tokens(
            token_file=settings.api_key_file,
            tokens=settings.api_keys.get_secret_value(),
            file_setting="EVERTUNE_GATEWAY_API_KEY_FILE",
            tokens_setting="EVERTUNE_GATEWAY_API_KEYS",
        )
        self.tls = ServerTls.of(settings, "EVERTUNE_GATEWAY_")
        check_exposure(
            Listener("EVERTUNE_GATEWAY_", "HOST", "API keys", "API_KEY_FILE", "ALLOW_PLAINTEXT_KEYS"),
            host=settings.host,
            has_credentials=self.keys is not None,
            tls=self.tls is not None,
            allow_unauthenticated=settings.allow_unauthenticated,
            allow_plaintext=settings.allow_plaintext_keys,
        )
        self.book = RouteBook()
        self.publisher: Publisher | None = None
        self.proxy: Proxy | None = None
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._routes: KvFollower | None = None  #: follows the routes bucket
        self._http_closed = asyncio.Event()
        self.stats = GatewayStats()  #: what `details()` shows and `/metrics` exports (`read_stats`)
        self.metrics_registry.register(FunctionCollector(lambda: gateway_metrics(self.read_stats())))

    async def on_start(self, ctx: ServiceContext) -> None:
        settings = self.settings
        if ctx.shared.nats_url and settings.prefix_secret.get_secret_value() == DEV_PREFIX_SECRET:
            raise SettingsError(
                "invalid setting EVERTUNE_GATEWAY_PREFIX_SECRET: the built-in value is public and serves"
                " only the embedded single-machine setup; set a secret of your own when the gateway"
                " joins a NATS of its own (EVERTUNE_NATS_URL)"
            )
        formats = await asyncio.to_thread(self._chat_formats, ctx.shared.data_dir)
        js = ctx.js
        timeout_s = settings.publish_timeout_s

        async def send(subject: str, batch: telemetry_pb2.RequestRecordBatch) -> None:
            await publish(js, subject, batch, msg_id=batch.batch_id, timeout_s=timeout_s)

        spool_path = settings.spool_path or ctx.shared.data_dir.expanduser() / "gateway" / "spool.bin"
        self.publisher = Publisher(
            send,
            Spool(spool_path, max_bytes=settings.spool_max_bytes),
            formats=formats,
            secret=settings.prefix_secret.get_secret_value().encode(),
            block_tokens=settings.prefix_block_tokens,
            queue_records=settings.queue_records,
            batch_records=settings.batch_records,
            batch_ms=settings.batch_ms,
            retry_s=settings.spool_retry_s,
            max_batch_bytes=lambda: ctx.nc.max_payload - HEADER_ROOM,
        )
        self.spawn(self.publisher.run(self._http_closed), name="publisher")
        await self._watch_routes(js, ctx.nc)
        self.proxy = Proxy(settings, self.book, self._offer, ready=self._not_ready, keys=self.keys)
        if settings.metrics:
            self.proxy.app.router.add_get(
                METRICS_PATH, self.proxy.operators_only(metrics_handler(self.metrics_registry))
            )
        # In-flight requests get most of the shutdown time; the rest is the publisher's final flush.
        self._runner = web.AppRunner(
            self.proxy.app,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=ctx.shared.shutdown_timeout_s * 0.7,
            **self.proxy.server_args,
        )
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            settings.host,
            settings.port,
            reuse_port=False,
            ssl_context=self.tls.ssl_context() if self.tls is not None else None,
        )
        try:
            await site.start()
        except OSError as err:
            await self._runner.cleanup()
            raise Unavailable(
                f"gateway cannot listen on {settings.host}:{settings.port}: {err.strerror or err}"
                " (set EVERTUNE_GATEWAY_PORT, 0 picks a free port)"
            ) from None
        sockets = [
            s for server in [site._server] if server is not None for s in getattr(server, "sockets", [])
        ]
        self.port = sockets[0].getsockname()[1] if sockets else settings.port
        self.spawn(self._serve_until_stopped(), name="http")
        self.log.info(
            "gateway listening",
            address=f"{settings.host}:{self.port}",
            tls=tls_mode(self.tls),
            endpoints=len(self.book.tables),
        )

    def _offer(self, item: Pending) -> None:
        """Count a finished request in the stats, then hand it to the publisher (never waits)."""
        self.stats.observe(item.record)
        assert self.publisher is not None
        self.publisher.offer(item)

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop] | None:
        """uvloop when the settings ask for it and it is installed (`evertune bench gateway`
        measures both); asyncio's loop otherwise."""
        if self.settings.event_loop != "uvloop":
            return None
        try:
            import uvloop
        except ImportError:
            return None
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory

    def _not_ready(self) -> str | None:
        """Why the gateway takes no requests now (`GET /ready`); None: it takes them. The proxy is
        built once the route tables are loaded, so only a shutdown makes it not ready."""
        return "the gateway is shutting down" if self.stopping.is_set() else None

    def read_stats(self) -> GatewayStats:
        """The stats, with what other parts keep read in now: route tables, requests in flight,
        the publisher's counts and the spool's size."""
        stats = self.stats
        stats.endpoints = len(self.book.tables)
        stats.in_flight = self.proxy.in_flight if self.proxy is not None else None
        stats.publisher = self.publisher.stats if self.publisher is not None else None
        stats.spool_bytes = sum(_size(path) for path in self._spool_files())
        return stats

    def _spool_files(self) -> list[Path]:
        if self.publisher is None:
            return []
        return [self.publisher.spool.path, self.publisher.spool.draining]

    def _chat_formats(self, data_dir: Path) -> ChatFormats:
        folder = self.settings.tokenizer_dir or ensure_model(data_dir.expanduser(), weights=False)
        return ChatFormats(ChatFormat.of_folder(folder))

    async def _watch_routes(self, js: JetStreamContext, nc: Client) -> None:
        """Load every route table, then keep following the bucket (`KvFollower`: a new watch and a
        full reload after each NATS reconnect, so a route change made while or after NATS was away
        is not missed)."""
        routes = wiring(self.settings).one(Delivery.KV_WATCH)
        self._routes = KvFollower(js, nc, routes.source, handler_of(self, routes.handler))
        await self._routes.load()
        self.spawn(self._routes.run(self.stopping), name="routes")

    def _apply(self, key: str, value: bytes | None) -> None:
        try:
            self.book.put(key, value)
        except EvertuneError as err:
            self.log.warning("route table ignored", key=key, error=str(err))

    async def _serve_until_stopped(self) -> None:
        """Serve until stop; then refuse new connections, let in-flight requests end, close."""
        try:
            await self.stopping.wait()
        finally:
            if self._runner is not None:
                await self._runner.cleanup()
            self._http_closed.set()

    async def on_stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._http_closed.set()
        if self._routes is not None:
            await self._routes.stop()

    @property
    def scheme(self) -> str:
        """The URLs' scheme: https when the port speaks TLS, else http."""
        return "http" if self.tls is None else "https"

    def listen(self) -> dict[str, str]:
        return {self.scheme: f"{self.settings.host}:{self.port}"} if self.port else {}

    def metrics_url(self) -> str:
        """`/metrics` on the proxy's own port (when `metrics` is on)."""
        return (
            f"{self.scheme}://{self.settings.host}:{self.port}{METRICS_PATH}"
            if self.settings.metrics and self.port
            else ""
        )

    def details(self) -> dict[str, Any]:
        return self.read_stats().details()


def _size(path: Path) -> int:
    """Bytes in a file; 0 when it is not there."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
