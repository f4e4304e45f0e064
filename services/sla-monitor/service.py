"""The sla-monitor service: live percentiles and burn-rate SLO alerts (`sla.breach`, `sla.resolved`).

A thin shell around the pure core (`monitor.py`): a durable consumer on `evertune.telemetry.>`
feeds finished requests into the windows, and an evaluation loop runs every rule each
`evaluate_interval_s` and publishes the decisions. Decisions wait in an outbox until published;
their event ids derive from the breach id, so a republished decision is stored once by JetStream.
Each decision is also queued for the alert receivers (`receivers.py`: Alertmanager, PagerDuty,
plain webhooks), delivered by tasks of their own. Drift detection arrives later (see
docs/services/sla-monitor.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import OrderedDict
from typing import Any, ClassVar

from evertune.sla_monitor.alerts import Breach, Decision, Resolved
from evertune.sla_monitor.burn_rate import unreachable_rules
from evertune.sla_monitor.monitor import MonitorConfig, SlaMonitor
from evertune.sla_monitor.receivers import AlertDispatcher
from evertune.sla_monitor.settings import SlaMonitorSettings
from evertune.sla_monitor.window import Observation, Targets, WindowStats, p99_gap
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError
from google.protobuf.timestamp_pb2 import Timestamp
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from evertune.bus import ConsumerSpec, DurableConsumer, PoisonMessage, publish_event
from evertune.events import EventKind, new_event
from evertune.runtime import Service, ServiceContext
from evertune.v1 import common_pb2, endpoint_pb2, events_pb2, telemetry_pb2

#: Attainment target of an Slo whose attainment_target is 0 (see endpoint.proto).
DEFAULT_ATTAINMENT = 0.9

_SEVERITY = {"page": common_pb2.SEVERITY_CRITICAL, "ticket": common_pb2.SEVERITY_WARNING}


def targets_from_slo(slo: endpoint_pb2.Slo) -> Targets:
    """The core's targets of an endpoint's Slo (attainment 0 means the default, 0.9)."""
    return Targets(
        ttft_ms=slo.ttft_p99_ms,
        itl_ms=slo.itl_p99_ms,
        attainment=slo.attainment_target or DEFAULT_ATTAINMENT,
    )


def observation(record: telemetry_pb2.RequestRecord) -> Observation | None:
    """A RequestRecord as the core sees it; None for a request that says nothing about latency
    (the client went away before any token, without an error)."""
    failed = bool(record.error_class) or record.status_code >= 400
    if not failed and record.ttft_ms <= 0 and record.client_disconnected:
        return None
    return Observation(
        endpoint=record.endpoint,
        deployment=record.deployment,
        time_s=record.start_time_unix_ns / 1e9 + record.e2e_ms / 1e3,
        ttft_ms=record.ttft_ms,
        itl_p99_ms=p99_gap(record.itl_ms),
        failed=failed,
    )


def _timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(round(seconds * 1e9))
    return ts


def _duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def _event_id(breach_id: str, kind: EventKind) -> str:
    return hashlib.sha256(f"{breach_id}:{kind.value}".encode()).hexdigest()[:32]


class SlaMonitorService(Service):
    name: ClassVar[str] = "sla-monitor"
    description: ClassVar[str] = "Live TTFT percentiles, burn-rate SLO alerts, workload drift"

    def __init__(self, settings: SlaMonitorSettings) -> None:
        super().__init__()
        self.settings = settings
        scale = settings.time_scale
        self.monitor = SlaMonitor(
            MonitorConfig(
                rules=settings.scaled_rules(),
                slot_s=settings.slot_s * scale,
                sketch_history_s=max(settings.sketch_history_s, settings.slot_s) * scale,
                resolve_hold_s=settings.resolve_hold_s * scale,
                min_requests=settings.min_requests,
                deployment_alerts=settings.deployment_alerts,
            )
        )
        self.outbox: list[events_pb2.Event] = []  #: decided events not yet published
        self.published = 0  #: events published
        self.duplicate_batches = 0  #: redelivered telemetry batches skipped
        self._seen_batches: OrderedDict[str, None] = OrderedDict()
        self._consumer: DurableConsumer | None = None
        self._js: JetStreamContext | None = None
        self._warned_unreachable: set[str] = set()
        self.alerts = AlertDispatcher(  #: alert receivers (queues and delivery tasks)
            settings.receivers,
            policy=settings.retry_policy(),
            timeout_s=settings.receiver_timeout_s,
            queue_size=settings.receiver_queue_size,
            log=self.log,
        )

    # --- SLO lookup --------------------------------------------------------------------------
    def slo_for(self, endpoint: str) -> endpoint_pb2.Slo:
        """The SLO of `endpoint`. Today the settings' defaults for every endpoint; override (or
        replace) to read the deployer's `endpoints` KV bucket once it exists."""
        s = self.settings
        return endpoint_pb2.Slo(
            ttft_p99_ms=s.ttft_p99_ms, itl_p99_ms=s.itl_p99_ms, attainment_target=s.attainment_target
        )

    # --- lifecycle ---------------------------------------------------------------------------
    async def on_start(self, ctx: ServiceContext) -> None:
        self._js = ctx.js
        spec = ConsumerSpec(
            stream="TELEMETRY", durable=self.settings.durable, filter_subject=self.settings.subject
        )
        self._consumer = DurableConsumer(ctx.js, spec, self._on_batch, source=self.name)
        self.spawn(self._consumer.run(self.stopping), name="telemetry")
        self.spawn(self._evaluate_loop(), name="evaluate")
        self.alerts.start(self.spawn, self.stopping)

    async def on_stop(self) -> None:
        await self.alerts.close()

    async def _on_batch(self, msg: Msg) -> None:
        try:
            batch = telemetry_pb2.RequestRecordBatch.FromString(msg.data)
        except DecodeError as err:
            raise PoisonMessage(f"undecodable RequestRecordBatch on {msg.subject}: {err}") from None
        if batch.batch_id and self._remember(batch.batch_id):
            self.duplicate_batches += 1
            return
        cached: dict[str, Targets] = {}
        for record in batch.records:
            obs = observation(record)
            if obs is None or not obs.endpoint:
                continue
            targets = cached.get(obs.endpoint)
            if targets is None:
                targets = cached[obs.endpoint] = targets_from_slo(self.slo_for(obs.endpoint))
                self._warn_unreachable(obs.endpoint, targets)
            self.monitor.observe(obs, targets)

    def _remember(self, batch_id: str) -> bool:
        """True when `batch_id` was seen already (a redelivery); remembers it otherwise."""
        if batch_id in self._seen_batches:
            return True
        self._seen_batches[batch_id] = None
        while len(self._seen_batches) > self.settings.dedup_batches:
            self._seen_batches.popitem(last=False)
        return False

    def _warn_unreachable(self, endpoint: str, targets: Targets) -> None:
        if endpoint in self._warned_unreachable:
            return
        self._warned_unreachable.add(endpoint)
        for rule in unreachable_rules(self.monitor.config.rules, budget=targets.budget):
            self.log.warning(
                "burn-rate rule can never fire",
                endpoint=endpoint,
                rule=rule.name,
                threshold=rule.burn_rate,
                max_burn_rate=round(1 / targets.budget, 3),
            )

    async def _evaluate_loop(self) -> None:
        interval = self.settings.evaluate_interval_s
        while not self.stopping.is_set():
            self.evaluate_and_queue(time.time())
            await self._flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), interval)
        await self._flush()

    def evaluate_and_queue(self, now: float) -> list[Decision]:
        """Evaluate every rule at `now` and queue the events of the decisions."""
        decisions = self.monitor.evaluate(now)
        for decision in decisions:
            self.outbox.append(self._event(decision))
            self.alerts.enqueue(decision)
        return decisions

    async def _flush(self) -> None:
        """Publish the outbox in order; what fails stays for the next round."""
        assert self._js is not None
        while self.outbox:
            try:
                await publish_event(self._js, self.outbox[0])
            except Exception as err:  # the bus may be away: keep the event and retry next round
                self.log.warning("could not publish event; will retry", error=str(err) or type(err).__name__)
                return
            self.outbox.pop(0)
            self.published += 1

    # --- decisions -> events -----------------------------------------------------------------
    def _event(self, decision: Decision) -> events_pb2.Event:
        key, incident, evaluation = decision.key, decision.incident, decision.evaluation
        rule = evaluation.rule
        now = evaluation.now
        targets = self.monitor.targets(key.endpoint) or targets_from_slo(self.slo_for(key.endpoint))
        stats = self.monitor.latency(key.endpoint, key.deployment, now=now, window_s=rule.long_window_s)
        long = evaluation.long
        attainment = long.attainment if long.attainment is not None else 1.0
        if isinstance(decision, Breach):
            kind = EventKind.SLA_BREACH
            payload: events_pb2.SlaBreach | events_pb2.SlaResolved = events_pb2.SlaBreach(
                breach_id=incident.breach_id,
                deployment=key.deployment,
                metric=events_pb2.SLO_METRIC_ATTAINMENT,
                window=_duration(rule.long_window_s),
                short_window=_duration(rule.short_window_s),
                burn_rate=long.burn_rate,
                short_burn_rate=evaluation.short.burn_rate,
                burn_rate_threshold=rule.burn_rate,
                observed_ttft_p99_ms=_p99(stats, "ttft"),
                target_ttft_p99_ms=targets.ttft_ms,
                observed_itl_p99_ms=_p99(stats, "itl"),
                target_itl_p99_ms=targets.itl_ms,
                observed_attainment=attainment,
                attainment_target=targets.attainment,
                request_count=long.requests,
                since=_timestamp(incident.since),
            )
            severity = _SEVERITY[rule.severity]
        else:
            assert isinstance(decision, Resolved)
            kind = EventKind.SLA_RESOLVED
            payload = events_pb2.SlaResolved(
                breach_id=incident.breach_id,
                deployment=key.deployment,
                metric=events_pb2.SLO_METRIC_ATTAINMENT,
                since=_timestamp(incident.since),
                duration=_duration(decision.resolved_at - incident.since),
                burn_rate=long.burn_rate,
                observed_ttft_p99_ms=_p99(stats, "ttft"),
                observed_attainment=attainment,
            )
            severity = common_pb2.SEVERITY_INFO
        event = new_event(
            kind, endpoint=key.endpoint, source=self.name, payload_message=payload, severity=severity
        )
        event.id = _event_id(incident.breach_id, kind)  # stable: a republish is dropped by JetStream
        self.log.info(
            f"{kind.value}",
            endpoint=key.endpoint,
            deployment=key.deployment,
            rule=rule.name,
            breach_id=incident.breach_id,
            burn_rate=round(long.burn_rate, 3),
            short_burn_rate=round(evaluation.short.burn_rate, 3),
        )
        return event

    # --- status ------------------------------------------------------------------------------
    def details(self) -> dict[str, Any]:
        now = time.time()
        window_s = self.settings.status_window_s * self.settings.time_scale
        endpoints: dict[str, Any] = {}
        for endpoint, deployment in self.monitor.scopes():
            stats = self.monitor.latency(endpoint, deployment, now=now, window_s=window_s)
            if stats is None:
                continue
            entry = endpoints.setdefault(endpoint, {"deployments": {}})
            figures = {
                "requests": stats.requests,
                "attainment": stats.attainment,
                "ttft_p50_ms": stats.ttft_p50_ms,
                "ttft_p90_ms": stats.ttft_p90_ms,
                "ttft_p99_ms": stats.ttft_p99_ms,
                "itl_p99_ms": stats.itl_p99_ms,
            }
            if deployment:
                entry["deployments"][deployment] = figures
            else:
                entry.update(figures)
        incidents = [
            {
                "endpoint": key.endpoint,
                "deployment": key.deployment,
                "rule": key.rule,
                "breach_id": incident.breach_id,
                "since": incident.since,
            }
            for key, incident in self.monitor.open_incidents().items()
        ]
        counters = self.monitor.counters
        consumer = self._consumer.stats if self._consumer else None
        return {
            "window_s": window_s,
            "endpoints_watched": len(endpoints),
            "endpoints": endpoints,
            "records_seen": counters.records,
            "records_dropped": counters.dropped,
            "duplicate_batches": self.duplicate_batches,
            "batches_acked": consumer.acked if consumer else 0,
            "batches_poisoned": consumer.poisoned if consumer else 0,
            "active_incidents": incidents,
            "breaches": counters.breaches,
            "resolved": counters.resolved,
            "events_published": self.published,
            "events_pending": len(self.outbox),
            "receivers": self.alerts.details(),
        }


def _p99(stats: WindowStats | None, which: str) -> float:
    if stats is None:
        return 0.0
    value = stats.ttft_p99_ms if which == "ttft" else stats.itl_p99_ms
    return value or 0.0
