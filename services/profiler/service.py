"""The profiler service: telemetry sink into ClickHouse, workload profiles, bottleneck reports.

It owns the store: the host opens and migrates it before the profiler starts. `on_start` spawns

- the telemetry sink (`evertune.profiler.sink`), a batching durable consumer of TELEMETRY;
- the drift consumer: a durable consumer of EVENTS filtered to `drift.detected`; each event builds
  a profile of its endpoint over the event's current window (trigger "drift", cause = the event);
  a redelivered event finds its stored profile (`catalog.by_cause`) and announces it again under
  the same event id (JetStream drops the repeat) instead of building another;
- the schedule: every `schedule_interval_s`, a profile of every endpoint with telemetry in the
  last `window_s` (trigger "schedule");
- the request subject `request_subject` (core NATS request/reply, JSON, queue group "profiler"):
  `{"endpoint": E, "endpoint_uid": U, "action": "latest"|"build", "window_s": s,
  "build_if_missing": true}` answers `{"ok": true, "built": bool, "endpoint_uid": U,
  "stored": {...}}` or `{"ok": false, "code": ..., "error": ...}`.

A profile is of one endpoint id (Endpoint.uid), not of a name: it reads only the requests recorded
under that id, is stored with it, and its `profile.ready` carries it (`Event.endpoint_uid`). Which
id: the schedule profiles each name under the id of its newest request in the window; a drift
event under the event's `endpoint_uid` (none: as the schedule); a request under its
`endpoint_uid` (none or "": the id of the name's newest request in the window, see
`builder.resolve_endpoint_uid`), and `latest` answers only a profile of that id.

Every build is stored (`profiles` table) before its `profile.ready` event is published; the
event's id derives from the profile id. Builds run one at a time. Prometheus metrics (the sink's
inserts and batches, profiles, consumers; `metrics.py`) are served on `metrics_port`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import aiohttp
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from evertune.domain.engines.errors import MetricsUnavailable
from evertune.domain.engines.metrics import (
    EMPTY_HISTOGRAM,
    EngineMetrics,
    MetricsParser,
    delta,
    fetch_metrics,
)
from evertune.domain.engines.registry import ENGINES
from evertune.errors import EvertuneError, InvalidArgument, NotFound
from evertune.infra.bus import Bucket, DurableConsumer, PoisonMessage, publish_event
from evertune.infra.bus.wiring import Delivery, durable_consumers, handler_of
from evertune.infra.events import EventKind, new_event
from evertune.infra.runtime import Service, ServiceContext
from evertune.infra.runtime.metrics import FunctionCollector
from evertune.infra.store import Store
from evertune.profiler import catalog
from evertune.profiler.bottleneck import EngineFigures, engine_figures
from evertune.profiler.builder import CreateRequest, create_profile, resolve_endpoint_uid
from evertune.profiler.metrics import profiler_metrics
from evertune.profiler.profile import ProfileConfig, to_jsonable
from evertune.profiler.queries import endpoint_seen, newest_uids
from evertune.profiler.settings import ProfilerSettings
from evertune.profiler.sink import SinkConfig, TelemetrySink
from evertune.profiler.stats import ProfilerStats
from evertune.profiler.wiring import wiring
from evertune.v1 import endpoint_pb2, events_pb2

#: Error codes of the request subject's replies.
ERROR_CODES = {NotFound: "not_found", InvalidArgument: "invalid_argument"}
#: Longest wait for the sink consumer's info before a scrape answers without its backlog, s.
CONSUMER_INFO_TIMEOUT_S = 1.0
#: What a request's `endpoint_uid` may be (Endpoint.uid is "ep-" + 24 hex digits).
ENDPOINT_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def sink_config(settings: ProfilerSettings, *, source: str = "profiler") -> SinkConfig:
    """The sink's configuration from the service's settings."""
    return SinkConfig(
        durable=settings.sink_durable,
        filter_subject=settings.sink_subject,
        batch_rows=settings.sink_batch_rows,
        flush_ms=settings.sink_flush_ms,
        ack_wait_s=settings.sink_ack_wait_s,
        source=source,
    )


def profile_config(settings: ProfilerSettings) -> ProfileConfig:
    """How profiles are measured, from the settings."""
    return ProfileConfig(block_tokens=settings.prefix_block_tokens, horizon_s=settings.prefix_horizon_s)


def event_id_of(profile_id: str) -> str:
    """The `profile.ready` event id of a profile (fixed, so a republish is stored once)."""
    return hashlib.sha256(f"profile.ready\n{profile_id}".encode()).hexdigest()[:32]


def stored_reply(stored: catalog.StoredProfile) -> dict[str, Any]:
    """A stored profile as the request subject answers it (without the trace's lines)."""
    return {
        "endpoint": stored.endpoint,
        "endpoint_uid": stored.endpoint_uid,
        "version": stored.version,
        "profile_id": stored.profile_id,
        "created": stored.created.isoformat(),
        "trigger": stored.trigger,
        "cause_id": stored.cause_id,
        "trace_uri": stored.ready.trace_uri,
        "trace_sha256": stored.trace_sha256,
        "trace_lines": stored.trace_jsonl.count("\n"),
        "ready": MessageToDict(stored.ready),
        "profile": to_jsonable(stored.profile),
    }


class ProfilerService(Service):
    name: ClassVar[str] = "profiler"
    description: ClassVar[str] = "Telemetry sink into ClickHouse; workload profiles; bottleneck reports"
    needs_store: ClassVar[bool] = True

    def __init__(self, settings: ProfilerSettings) -> None:
        super().__init__()
        self.settings = settings
        self._store: Store | None = None
        self._store_url = ""
        self._js: JetStreamContext | None = None
        self.sink: TelemetrySink | None = None
        self.drift: DurableConsumer | None = None
        self._requests: Subscription | None = None
        self._http: aiohttp.ClientSession | None = None
        self._build_lock = asyncio.Lock()
        self._scrapes: dict[str, EngineMetrics] = {}  # upstream URL -> last scrape
        #: what `details()` shows and the metrics export (`read_stats`)
        self.stats = ProfilerStats(sink_durable=settings.sink_durable, drift_durable=settings.drift_durable)
        self.metrics_registry.register(FunctionCollector(lambda: profiler_metrics(self.read_stats())))

    async def on_start(self, ctx: ServiceContext) -> None:
        assert ctx.store is not None, "the host opens the store for services with needs_store"
        self._store = ctx.store
        self._store_url = ctx.shared.store_url
        self._js = ctx.js
        self.sink = TelemetrySink(ctx.js, ctx.store, sink_config(self.settings, source=self.name))
        await self.serve_metrics(
            ctx,
            host=self.settings.metrics_host,
            port=self.settings.metrics_port,
            refresh=self._read_sink_pending,
        )
        self.spawn(self.sink.run(self.stopping), name="telemetry-sink")
        declared = wiring(self.settings)
        (self.drift,) = durable_consumers(ctx.js, declared, self, source=self.name).values()
        self.spawn(self.drift.run(self.stopping), name="drift")
        if self.settings.schedule_interval_s > 0:
            self.spawn(self._schedule(), name="schedule")
        requests = declared.one(Delivery.CORE)
        self._requests = await ctx.nc.subscribe(
            requests.subject, queue=requests.queue, cb=handler_of(self, requests.handler)
        )

    async def on_stop(self) -> None:
        if self._requests is not None:
            with contextlib.suppress(NatsError):  # stopping: it ends with the connection
                await self._requests.unsubscribe()
        if self._http is not None:
            await self._http.close()

    async def _read_sink_pending(self) -> None:
        """Before each scrape: the sink durable's undelivered messages, from JetStream."""
        self.stats.sink_pending = None
        if self._js is None or self.sink is None:
            return
        # no consumer yet, NATS away: the gauge is left out
        with contextlib.suppress(NatsError, TimeoutError):
            info = await asyncio.wait_for(
                self._js.consumer_info(self.sink.config.stream, self.sink.config.durable),
                CONSUMER_INFO_TIMEOUT_S,
            )
            self.stats.sink_pending = info.num_pending or 0

    def read_stats(self) -> ProfilerStats:
        """The stats, with what other parts keep read in now: the store's URL, the sink's counts
        and inserts, the drift consumer's counts."""
        stats = self.stats
        stats.store = self._store_url
        if self.sink is not None:
            stats.sink = self.sink.stats
            stats.insert_seconds, stats.batch_rows = self.sink.insert_seconds, self.sink.batch_rows
        stats.drift = self.drift.stats if self.drift is not None else None
        return stats

    def details(self) -> dict[str, Any]:
        return self.read_stats().details()

    # --- building --------------------------------------------------------------------------
    async def build(
        self,
        endpoint: str,
        *,
        trigger: str,
        cause_id: str = "",
        window_s: float | None = None,
        now: datetime | None = None,
        endpoint_uid: str | None = None,
    ) -> catalog.StoredProfile:
        """Build, store and announce a profile of `endpoint` over the window ending `now`, of the
        endpoint id `endpoint_uid` (None: the id of the name's newest request in the window)."""
        assert self._store is not None and self._js is not None, "the service is not started"
        until = now or datetime.now(UTC)
        since = until - timedelta(seconds=window_s or self.settings.window_s)
        async with self._build_lock:
            building = time.monotonic()
            try:
                stored = await self._create(
                    endpoint,
                    since=since,
                    until=until,
                    trigger=trigger,
                    cause_id=cause_id,
                    endpoint_uid=endpoint_uid,
                )
            except Exception:
                self.stats.failed += 1
                raise
            self.stats.built += 1
            self.stats.build_seconds.observe(time.monotonic() - building)
        self.log.info(
            "profile built",
            endpoint=endpoint,
            endpoint_uid=stored.endpoint_uid,
            version=stored.version,
            requests=stored.profile.requests,
            trigger=trigger,
            verdict=stored.ready.bottleneck_verdict,
        )
        await self.announce(stored)
        return stored

    async def _create(
        self,
        endpoint: str,
        *,
        since: datetime,
        until: datetime,
        trigger: str,
        cause_id: str,
        endpoint_uid: str | None,
    ) -> catalog.StoredProfile:
        """Build and store one profile (the engines' figures first, where they can be read)."""
        assert self._store is not None
        engine, notes = await self._engine_figures(endpoint)
        return await create_profile(
            self._store,
            CreateRequest(
                endpoint=endpoint,
                since=since,
                until=until,
                trigger=trigger,
                created=datetime.now(UTC),
                cause_id=cause_id,
                endpoint_uid=endpoint_uid,
                engine=engine,
                notes=notes,
            ),
            config=profile_config(self.settings),
            max_samples=self.settings.max_samples,
        )

    async def announce(self, stored: catalog.StoredProfile) -> None:
        """Publish `profile.ready` for a stored profile (its event id is fixed by the profile id)."""
        assert self._js is not None
        event = new_event(
            EventKind.PROFILE_READY,
            endpoint=stored.endpoint,
            source=self.name,
            payload_message=stored.ready,
            cause_id=stored.cause_id,
            endpoint_uid=stored.endpoint_uid,
        )
        event.id = event_id_of(stored.profile_id)
        await publish_event(self._js, event)
        self.stats.published += 1

    async def _engine_figures(self, endpoint: str) -> tuple[EngineFigures | None, dict[str, str]]:
        """The engine's figures since the last scrape of each of the endpoint's deployments."""
        if not self.settings.scrape_engines or self._js is None:
            return None, {}
        try:
            bucket = await Bucket.open(self._js, self.settings.deployments_bucket)
            keys = [k for k in await bucket.keys() if k.startswith(f"{endpoint}.")]
        except Exception as err:  # no bucket, NATS trouble: the report falls back to telemetry
            return None, {"engine_metrics": f"deployments not readable: {err}"}
        urls: list[tuple[str, MetricsParser]] = []
        for key in keys:
            entry = await bucket.get(key)
            if entry is None:
                continue
            try:
                deployment = endpoint_pb2.Deployment.FromString(entry.value)
            except DecodeError:
                continue
            if deployment.upstream_url:
                # each engine kind's /metrics read by its own parser (vLLM's for an unknown kind)
                kind = ENGINES.get(deployment.engine_config.engine or "vllm", ENGINES["vllm"])
                urls.append((deployment.upstream_url, kind.parse_metrics))
        if not urls:
            return None, {"engine_metrics": "no deployment with an upstream URL"}
        if self._http is None:
            self._http = aiohttp.ClientSession()
        deltas = []
        problems = []
        for url, parse in urls:
            try:
                after = await fetch_metrics(
                    self._http,
                    url,
                    parse=parse,
                    timeout_s=self.settings.scrape_timeout_s,
                    scraped_at=time.time(),
                )
            except MetricsUnavailable as err:
                problems.append(str(err))
                continue
            before = self._scrapes.get(url)
            self._scrapes[url] = after
            deltas.append(delta(before, after) if before is not None else delta(_EMPTY_SCRAPE, after))
        notes = {"engine_metrics_errors": "; ".join(problems)} if problems else {}
        return engine_figures(deltas), notes

    # --- triggers --------------------------------------------------------------------------
    async def _on_drift(self, msg: Msg) -> None:
        try:
            event = events_pb2.Event.FromString(msg.data)
        except DecodeError as err:
            raise PoisonMessage(f"undecodable Event on {msg.subject}: {err}") from None
        if event.WhichOneof("payload") != "drift_detected" or not event.endpoint:
            return
        assert self._store is not None
        # The event's endpoint id, when it has one; else the id of the newest request in the window.
        uid = event.endpoint_uid or None
        existing = await catalog.by_cause(self._store, event.endpoint, event.id, endpoint_uid=uid)
        if existing is not None:
            await self.announce(existing)
            return
        window = event.drift_detected.current_window.ToTimedelta().total_seconds()
        await self.build(
            event.endpoint, trigger="drift", cause_id=event.id, window_s=window or None, endpoint_uid=uid
        )

    async def _schedule(self) -> None:
        interval = self.settings.schedule_interval_s
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), interval)
            if self.stopping.is_set():
                return
            await self.scheduled_round(datetime.now(UTC))

    async def scheduled_round(self, now: datetime) -> list[catalog.StoredProfile]:
        """One scheduled round: a profile of every endpoint name with telemetry in the window, of the
        endpoint id its newest request there was recorded under (a stale incarnation's requests of
        the same name are never mixed in)."""
        assert self._store is not None
        built = []
        since = now - timedelta(seconds=self.settings.window_s)
        for endpoint, uid in (await newest_uids(self._store, since, now)).items():
            try:
                built.append(await self.build(endpoint, trigger="schedule", now=now, endpoint_uid=uid))
            except Exception as err:  # one endpoint failing must not stop the others
                error = self.stats.last_error = f"{type(err).__name__}: {err}"
                self.log.warning("scheduled profile failed", endpoint=endpoint, endpoint_uid=uid, error=error)
        return built

    async def _on_request(self, msg: Msg) -> None:
        try:
            reply = await self.handle_request(msg.data)
        except EvertuneError as err:
            code = next((c for kind, c in ERROR_CODES.items() if isinstance(err, kind)), "failed")
            reply = {"ok": False, "code": code, "error": str(err)}
        except Exception as err:  # the asker gets a line, the log the details
            error = self.stats.last_error = f"{type(err).__name__}: {err}"
            self.log.error("profile request failed", error=error)
            reply = {"ok": False, "code": "internal", "error": f"profile build failed: {error}"}
        if msg.reply:
            await msg.respond(json.dumps(reply).encode())

    async def handle_request(self, data: bytes) -> dict[str, Any]:
        """Answer one request of the request subject (see the module doc)."""
        assert self._store is not None
        try:
            request = json.loads(data or b"{}")
        except ValueError:
            raise InvalidArgument("profile request is not JSON") from None
        if not isinstance(request, dict):
            raise InvalidArgument("profile request must be a JSON object")
        endpoint = request.get("endpoint")
        if not isinstance(endpoint, str) or not endpoint:
            raise InvalidArgument("profile request needs an endpoint name")
        action = request.get("action", "latest")
        if action not in ("latest", "build"):
            raise InvalidArgument(f"unknown profile action {action!r}; use latest or build")
        window_s = request.get("window_s")
        if window_s is not None and (not isinstance(window_s, int | float) or not window_s > 0):
            raise InvalidArgument(f"window_s must be a positive number of seconds, not {window_s!r}")
        uid = request.get("endpoint_uid")
        if uid is not None and (not isinstance(uid, str) or (uid and not ENDPOINT_UID.fullmatch(uid))):
            raise InvalidArgument(
                "endpoint_uid must be an endpoint's id (Endpoint.uid), e.g. 'ep-' + 24 hex digits"
            )
        asked = bool(uid)
        if not asked:  # none asked: the id of the name's newest request (see resolve_endpoint_uid)
            now = datetime.now(UTC)
            since = now - timedelta(seconds=window_s or self.settings.window_s)
            uid = await resolve_endpoint_uid(self._store, endpoint, since, now)
            if uid is None:
                raise NotFound(f"unknown endpoint {endpoint!r}: no telemetry and no profile of it")
        assert isinstance(uid, str)
        if action == "latest":
            stored = await catalog.latest(self._store, endpoint, endpoint_uid=uid)
            if stored is not None:
                return {"ok": True, "built": False, "endpoint_uid": uid, "stored": stored_reply(stored)}
            if not request.get("build_if_missing", True):
                raise NotFound(f"no profile of endpoint {endpoint!r} (id {uid!r}) is stored")
        if asked and not await self._known(endpoint, uid):
            raise NotFound(
                f"unknown endpoint {endpoint!r} with id {uid!r}: no telemetry and no profile of it"
            )
        stored = await self.build(endpoint, trigger="api", window_s=window_s, endpoint_uid=uid)
        return {"ok": True, "built": True, "endpoint_uid": uid, "stored": stored_reply(stored)}

    async def _known(self, endpoint: str, endpoint_uid: str) -> bool:
        """Whether the endpoint id has telemetry or a stored profile under this name."""
        assert self._store is not None
        return await endpoint_seen(self._store, endpoint, endpoint_uid=endpoint_uid) or (
            await catalog.known_endpoint(self._store, endpoint, endpoint_uid=endpoint_uid)
        )


_EMPTY_SCRAPE = EngineMetrics(
    scraped_at=0.0,
    queue_time=EMPTY_HISTOGRAM,
    prefill_time=EMPTY_HISTOGRAM,
    decode_time=EMPTY_HISTOGRAM,
    ttft=EMPTY_HISTOGRAM,
    inter_token_latency=EMPTY_HISTOGRAM,
    preemptions=0.0,
    prefix_cache_hits=0.0,
    prefix_cache_queries=0.0,
    prompt_tokens=0.0,
    generation_tokens=0.0,
    requests_succeeded=0.0,
    kv_cache_usage=0.0,
    requests_waiting=0.0,
    requests_running=0.0,
)
