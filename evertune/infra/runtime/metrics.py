"""Prometheus `/metrics` for services: one registry per service, served by aiohttp.

Each service builds its own `CollectorRegistry` (never the process-global one: `evertune up` runs
every service in one process, and two services' metrics must not collide or leak into each other's
scrape). A service that already runs an aiohttp app adds `metrics_handler(registry)` as a route; a
service without one starts a `MetricsServer` (port 0 picks a free one).

Figures a service already keeps (counters in its stats, live windows) are best exported by a
collector that reads them at scrape time (`prometheus_client.registry.Collector`), so there is one
source of truth and nothing to keep in step. A histogram's state is kept the same way, as a
`Distribution` in the service's stats (pure data: no prometheus_client in the logic modules), and
exported by `histogram`. `consumer_metrics` exports the stats of a service's JetStream consumers
under one set of names.

Names follow Prometheus' conventions: the `evertune_<service>_` prefix, base units (`_seconds`,
`_bytes`), `_total` on counters, histograms rather than precomputed quantiles.
"""

from __future__ import annotations

import bisect
import math
import ssl
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from evertune.errors import Unavailable

if TYPE_CHECKING:  # (the bus imports the runtime's tasks: no import cycle at run time)
    from evertune.infra.bus import ConsumerStats

#: Path every evertune service serves its metrics on.
METRICS_PATH = "/metrics"

#: An aiohttp request handler.
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: Called before each scrape, to read what only an await can (KV buckets, engines' /metrics).
Refresh = Callable[[], Awaitable[None]]
#: Label values of one series -> its value.
Series = Mapping[tuple[str, ...], float]
#: What `by_label` maps label values to: a count or a `Distribution`.
V = TypeVar("V")

#: Buckets (s) of steps that take milliseconds to seconds: store inserts, queries, analyses.
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Buckets (s) of steps that take seconds to hours: engine starts, replays, trials, searches.
SLOW_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)
#: Buckets of counts (rows in a batch, trials in a search).
COUNT_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0)


@dataclass
class Distribution:
    """A histogram's state as plain data: observations counted in fixed buckets, and their sum.

    Kept in a service's stats and exported at scrape time by `histogram` (cumulative buckets, as
    Prometheus wants them)."""

    bounds: tuple[float, ...]  #: upper bounds of the buckets, ascending (+Inf is implied)
    counts: list[int] = field(default_factory=list)  #: observations per bucket (not cumulative), +Inf last
    total: float = 0.0  #: sum of the observed values

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count one observation (in the first bucket whose bound is >= value)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        """Observations made."""
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """(`le`, observations <= it), ascending, "+Inf" last."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if math.isinf(bound) else repr(float(bound)), float(running)))
        return out


def counter(name: str, documentation: str, value: float | Series, labels: Sequence[str] = ()) -> Metric:
    """A counter family (`name` ends in `_total`): one value, or one per label values."""
    family = CounterMetricFamily(name, documentation, labels=list(labels))
    for values, number in _series(value):
        family.add_metric(list(values), number)
    return family


def gauge(name: str, documentation: str, value: float | Series, labels: Sequence[str] = ()) -> Metric:
    """A gauge family: one value, or one per label values."""
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for values, number in _series(value):
        family.add_metric(list(values), number)
    return family


def histogram(
    name: str,
    documentation: str,
    value: Distribution | Mapping[tuple[str, ...], Distribution],
    labels: Sequence[str] = (),
) -> Metric:
    """A histogram family from `Distribution`s: one, or one per label values."""
    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    items = {(): value}.items() if isinstance(value, Distribution) else value.items()
    for values, dist in sorted(items):
        family.add_metric(list(values), buckets=dist.cumulative(), sum_value=dist.total)
    return family


def by_label(values: Mapping[str, V], known: Iterable[str], missing: V) -> dict[tuple[str, ...], V]:
    """One series per value of a single label: every `known` value (at `missing` until it is first
    counted, so a rate sees the first one and dashboards and alerts find the series), then any other
    value counted."""
    return {(k,): values.get(k, missing) for k in dict.fromkeys([*known, *values])}


def _series(value: float | Series) -> Iterable[tuple[tuple[str, ...], float]]:
    return [((), float(value))] if isinstance(value, int | float) else sorted(value.items())


def consumer_metrics(prefix: str, consumers: Mapping[str, ConsumerStats]) -> Iterator[Metric]:
    """A service's JetStream consumers (durable name -> stats), label `consumer`:
    `<prefix>_messages_acked_total`, `_messages_retried_total` (nak'ed for redelivery),
    `_messages_poisoned_total`, `_messages_abandoned_total` (given back at stop),
    `_messages_in_flight` (gauge)."""
    labels = ["consumer"]

    def each(read: Callable[[ConsumerStats], int]) -> dict[tuple[str, ...], float]:
        return {(name,): float(read(stats)) for name, stats in consumers.items()}

    yield counter(
        f"{prefix}_messages_acked_total", "Messages handled and acked", each(lambda s: s.acked), labels
    )
    yield counter(
        f"{prefix}_messages_retried_total",
        "Messages nak'ed for redelivery (a handler or write failed)",
        each(lambda s: s.retried),
        labels,
    )
    yield counter(
        f"{prefix}_messages_poisoned_total",
        "Messages terminated as poison (undecodable, or failed at every delivery)",
        each(lambda s: s.poisoned),
        labels,
    )
    yield counter(
        f"{prefix}_messages_abandoned_total",
        "Messages given back unfinished at stop",
        each(lambda s: s.abandoned),
        labels,
    )
    yield gauge(
        f"{prefix}_messages_in_flight", "Messages being handled now", each(lambda s: s.in_flight), labels
    )


class FunctionCollector(Collector):
    """A collector whose families come from a function called at each scrape."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families()


def new_registry() -> CollectorRegistry:
    """A registry of one service (not the process-global default)."""
    return CollectorRegistry(auto_describe=True)


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text exposition format."""
    return generate_latest(registry)


def metrics_handler(registry: CollectorRegistry, *, refresh: Refresh | None = None) -> Handler:
    """An aiohttp GET handler answering the registry's exposition (after `refresh`, if given)."""

    async def handle(_: web.Request) -> web.Response:
        if refresh is not None:
            await refresh()
        return web.Response(body=exposition(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return handle


class MetricsServer:
    """A small aiohttp server answering `GET /metrics` with one registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        refresh: Refresh | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.registry = registry
        self.host = host
        self.port = port  #: the bound port once started (the chosen one when asked for 0)
        self.refresh = refresh  #: awaited before each scrape (None: nothing to read first)
        self.ssl_context = ssl_context  #: TLS of the port (None: plain HTTP)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """`http(s)://host:port/metrics` (after start)."""
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}{METRICS_PATH}"

    async def start(self) -> int:
        """Bind and serve; returns the port. A port in use raises a one-line `Unavailable`."""
        app = web.Application()
        app.router.add_get(METRICS_PATH, metrics_handler(self.registry, refresh=self.refresh))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_port=False, ssl_context=self.ssl_context)
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
