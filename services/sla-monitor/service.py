"""The sla-monitor service: live percentiles, burn-rate SLO alerts (`sla.breach`, `sla.resolved`)
and workload drift (`drift.detected`).

A thin shell around the pure cores (`monitor.py`, `endpoint_drift.py`, `registry.py`; records and
events converted in `payloads.py`): a durable consumer on
`evertune.telemetry.>` feeds finished requests into the windows and each endpoint's drift detector;
an evaluation loop runs every rule each `evaluate_interval_s` (and the drift checks each
`drift_check_interval_s`) and publishes the decisions. Events wait in an outbox until published;
their ids are derived from what they report, so a republished event is stored once by JetStream.
Each decision is also queued for the alert receivers (`receivers.py`: Alertmanager, PagerDuty,
plain webhooks, log lines), delivered by tasks of their own. The deployer's `endpoints` KV bucket is
watched for each endpoint's SLO, alert routes and stable deployment; `profile.ready` events give
drift its reference. Its state is read into one `SlaMonitorStats` (`stats.py`, `read_stats`),
which both `details()` and the Prometheus metrics (`metrics.py`, on `metrics_port`) render.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from typing import Any, ClassVar

from google.protobuf.message import DecodeError
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import BucketNotFoundError

from evertune.domain.slo import Slo
from evertune.errors import InvalidArgument
from evertune.infra.bus import (
    ConsumerStats,
    DurableConsumer,
    KvFollower,
    PoisonMessage,
    Resubscriber,
    publish_event,
)
from evertune.infra.bus.wiring import Consumes, Delivery, durable_consumers, handler_of
from evertune.infra.events import EventKind, new_event
from evertune.infra.runtime import Service, ServiceContext
from evertune.infra.runtime.metrics import FunctionCollector
from evertune.sla_monitor.alerts import Breach, Decision
from evertune.sla_monitor.burn_rate import unreachable_rules
from evertune.sla_monitor.drift_reference import DriftReference
from evertune.sla_monitor.endpoint_drift import DriftReport, EndpointDrift
from evertune.sla_monitor.metrics import sla_metrics
from evertune.sla_monitor.monitor import MonitorConfig, SlaMonitor
from evertune.sla_monitor.payloads import (
    EVENT_SEVERITY,
    ReceiverConfig,
    drift_alert_body,
    drift_event_id,
    drift_payload,
    drift_sample,
    drift_summary,
    incident_event_id,
    incident_payload,
    observation,
    profile_from_ready,
)
from evertune.sla_monitor.receivers import AlertDispatcher
from evertune.sla_monitor.registry import EndpointRegistry
from evertune.sla_monitor.settings import SlaMonitorSettings
from evertune.sla_monitor.stats import ALL, DriftStatus, JudgedCounts, SlaMonitorStats, SloRow
from evertune.sla_monitor.window import Observation
from evertune.sla_monitor.wiring import wiring
from evertune.v1 import common_pb2, endpoint_pb2, events_pb2, telemetry_pb2


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
                deployment_min_requests=settings.deployment_min_requests,
                fine_slot_s=settings.fine_slot_s * scale,
                fine_history_s=settings.fine_history_s * scale,
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
            signing_secret=settings.alert_signing_secret.get_secret_value().encode(),
        )
        self.registry = EndpointRegistry()  #: the deployer's endpoints (SLOs, routes)
        self.drift: dict[str, EndpointDrift] = {}  #: drift state per endpoint
        self.drift_findings: dict[tuple[str, str], int] = {}  #: findings per (endpoint, feature)
        self.drift_events = 0  #: drift.detected events decided
        self._profiles: dict[str, DriftReference] = {}  # profile.ready references not yet applied
        self._next_drift_check = 0.0
        self._endpoints: KvFollower | None = None  #: follows the endpoints bucket
        self._profiles_sub: Resubscriber | None = None  #: the profile.ready ordered consumer
        self.profile_ids: dict[str, str] = {}  #: id of the last profile.ready handled per endpoint
        self.registry_loaded = asyncio.Event()  #: set once the endpoints bucket's values are in
        #: requests observed and good ones, cumulative, per (endpoint, deployment or "all")
        self.judged: dict[tuple[str, str], JudgedCounts] = {}
        self.metrics_registry.register(FunctionCollector(lambda: sla_metrics(self.read_stats())))

    @property
    def telemetry_consumer(self) -> tuple[str, ConsumerStats] | None:
        """The telemetry consumer's durable name and stats (None before start)."""
        return (self.settings.durable, self._consumer.stats) if self._consumer is not None else None

    # --- SLO and receivers lookup ------------------------------------------------------------
    def slo_for(self, endpoint: str) -> Slo:
        """The SLO of `endpoint`: its own from the endpoints bucket, else the settings' defaults
        (also for a stored SLO no endpoint can have, which is logged)."""
        entry = self.registry.get(endpoint)
        if entry is not None and entry.slo is not None:
            try:
                return Slo.from_proto(entry.slo)
            except InvalidArgument as err:
                self.log.warning(
                    "endpoint SLO unusable; the default SLO applies", endpoint=endpoint, error=str(err)
                )
        s = self.settings
        return Slo.from_proto(
            endpoint_pb2.Slo(
                ttft_p99_ms=s.ttft_p99_ms, itl_p99_ms=s.itl_p99_ms, attainment_target=s.attainment_target
            )
        )

    def receivers_for(self, endpoint: str) -> list[ReceiverConfig]:
        """Where `endpoint`'s alerts go: its alert routes when the endpoints bucket has it (none
        routes = no receiver), else the settings' receivers."""
        entry = self.registry.get(endpoint)
        return list(entry.receivers) if entry is not None else list(self.alerts.defaults)

    # --- lifecycle ---------------------------------------------------------------------------
    async def on_start(self, ctx: ServiceContext) -> None:
        self._js = ctx.js
        declared = wiring(self.settings)
        await self._watch_endpoints(ctx.js, ctx.nc, next(declared.of(Delivery.KV_WATCH), None))
        for profiles in declared.of(Delivery.LATEST):
            await self._subscribe_profiles(ctx.js, ctx.nc, profiles)
        await self.serve_metrics(ctx, host=self.settings.metrics_host, port=self.settings.metrics_port)
        (self._consumer,) = durable_consumers(ctx.js, declared, self, source=self.name).values()
        self.spawn(self._consumer.run(self.stopping), name="telemetry")
        self.spawn(self._evaluate_loop(), name="evaluate")
        self.alerts.outbound = ctx.shared.outbound_policy()
        self.alerts.start(self.spawn, self.stopping)

    async def on_stop(self) -> None:
        if self._endpoints is not None:
            await self._endpoints.stop()
        await self.alerts.close()

    # --- endpoints bucket --------------------------------------------------------------------
    async def _watch_endpoints(self, js: JetStreamContext, nc: Client, endpoints: Consumes | None) -> None:
        """Load every endpoint of the bucket, then follow it (`KvFollower`: a new watch and a full
        reload after each NATS reconnect); no bucket: defaults only."""
        if endpoints is None:
            self.registry_loaded.set()
            return
        name = endpoints.source
        follower = KvFollower(js, nc, name, handler_of(self, endpoints.handler))
        try:
            await follower.load()
        except BucketNotFoundError:
            self.log.warning("endpoints bucket missing; every endpoint gets the default SLO", bucket=name)
            self.registry_loaded.set()
            return
        self._endpoints = follower
        self.registry_loaded.set()
        self.log.info("endpoints loaded", bucket=name, endpoints=len(self.registry))
        self.spawn(follower.run(self.stopping), name="endpoints")

    def _apply_endpoint(self, key: str, value: bytes | None) -> None:
        try:
            change = self.registry.put(key, value)
        except DecodeError as err:
            self.log.warning("endpoint entry ignored: not an Endpoint", key=key, error=str(err))
            return
        self._warned_unreachable.discard(key)  # the SLO may have changed
        if change.replaced and self.drift.pop(change.endpoint, None) is not None:
            self.log.info("endpoint replaced; its drift baseline is dropped", endpoint=change.endpoint)
        tracker = self.drift.get(change.endpoint)
        if change.deployment_changed and tracker is not None:
            tracker.deployment_changed()
            self.log.info("stable deployment changed; drift baseline restarts", endpoint=change.endpoint)

    async def _subscribe_profiles(self, js: JetStreamContext, nc: Client, profiles: Consumes) -> None:
        """The latest profile.ready per endpoint, then each new one: an ordered consumer, made
        again after each NATS reconnect (a restarted server has lost it)."""

        async def subscribe() -> Any:
            return await js.subscribe(
                profiles.subject,
                stream=profiles.source,
                ordered_consumer=True,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT),
                cb=handler_of(self, profiles.handler),
            )

        self._profiles_sub = Resubscriber(nc, subscribe, name="profile.ready")
        await self._profiles_sub.start()
        self.spawn(self._profiles_sub.run(self.stopping), name="profiles")

    # --- drift -------------------------------------------------------------------------------
    async def _on_profile(self, msg: Msg) -> None:
        try:
            event = events_pb2.Event.FromString(msg.data)
        except DecodeError:
            return
        if event.WhichOneof("payload") != "profile_ready" or not event.endpoint:
            return
        profile_id = event.profile_ready.profile_id
        if profile_id and self.profile_ids.get(event.endpoint) == profile_id:
            return  # delivered again after a re-subscribe: already taken (or refused)
        self.profile_ids[event.endpoint] = profile_id
        self.use_profile(event.endpoint, event.profile_ready)

    def use_profile(self, endpoint: str, ready: events_pb2.ProfileReady) -> bool:
        """Make a `profile.ready` the drift reference of `endpoint` when it carries enough."""
        s = self.settings
        profile = profile_from_ready(
            ready, min_requests=s.drift_min_requests, prefix_horizon_s=s.drift_prefix_horizon_s * s.time_scale
        )
        if profile is None:
            self.log.info(
                "profile.ready carries too little for a drift reference; keeping the current one",
                endpoint=endpoint,
                profile_id=ready.profile_id,
                requests=ready.request_count,
            )
            return False
        tracker = self.drift.get(endpoint)
        if tracker is None:
            self._profiles[endpoint] = profile
        else:
            tracker.use_profile(profile)
        self.log.info("drift reference from profile", endpoint=endpoint, profile_id=ready.profile_id)
        return True

    def _drift_tracker(self, endpoint: str) -> EndpointDrift:
        tracker = self.drift.get(endpoint)
        if tracker is None:
            s = self.settings
            tracker = self.drift[endpoint] = EndpointDrift(
                endpoint=endpoint,
                config=s.drift_config(),
                reference_s=s.drift_reference_s * s.time_scale,
            )
            profile = self._profiles.pop(endpoint, None)
            if profile is not None:
                tracker.use_profile(profile)
        return tracker

    def check_drift_and_queue(self, now: float) -> list[DriftReport]:
        """Run every endpoint's drift checks at `now` and queue a drift.detected per report."""
        reports = [r for tracker in self.drift.values() if (r := tracker.check(now)) is not None]
        for report in reports:
            self.outbox.append(self._drift_event(report))
            self.drift_events += 1
            for f in report.findings:
                key = (report.endpoint, f.feature)
                self.drift_findings[key] = self.drift_findings.get(key, 0) + 1
        return reports

    def _drift_event(self, report: DriftReport) -> events_pb2.Event:
        payload = drift_payload(report)
        event = new_event(
            EventKind.DRIFT_DETECTED,
            endpoint=report.endpoint,
            source=self.name,
            payload_message=payload,
            endpoint_uid=self.registry.uid_of(report.endpoint),
        )
        event.id = drift_event_id(report)
        summary = drift_summary(report)
        self.log.info("drift.detected", endpoint=report.endpoint, summary=summary, event_id=event.id)
        self.alerts.enqueue_event(
            EventKind.DRIFT_DETECTED.value,
            severity="warning",
            ident=event.id,
            body=drift_alert_body(report, event_id=event.id, summary=summary, payload=payload),
            summary=summary,
            receivers=self.receivers_for(report.endpoint),
        )
        return event

    def _stale(self, record: telemetry_pb2.RequestRecord) -> bool:
        """A record of an endpoint the name no longer holds (served before it was deleted and
        created again): it says nothing of the endpoint's workload now."""
        uid = self.registry.uid_of(record.endpoint)
        return bool(record.endpoint_uid and uid and record.endpoint_uid != uid)

    async def _on_batch(self, msg: Msg) -> None:
        try:
            batch = telemetry_pb2.RequestRecordBatch.FromString(msg.data)
        except DecodeError as err:
            raise PoisonMessage(f"undecodable RequestRecordBatch on {msg.subject}: {err}") from None
        if batch.batch_id and self._remember(batch.batch_id):
            self.duplicate_batches += 1
            return
        cached: dict[str, Slo] = {}
        for record in batch.records:
            if self.settings.drift and record.endpoint and not self._stale(record):
                sample = drift_sample(record)
                if sample is not None:
                    self._drift_tracker(record.endpoint).observe(sample)
            obs = observation(record)
            if obs is None or not obs.endpoint:
                continue
            targets = cached.get(obs.endpoint)
            if targets is None:
                targets = cached[obs.endpoint] = self.slo_for(obs.endpoint)
                self._warn_unreachable(obs.endpoint, targets)
            self.monitor.observe(obs, targets)
            self.count_judged(obs, targets)

    def count_judged(self, obs: Observation, targets: Slo) -> None:
        """Count one observed request, and whether it was good, under its endpoint as a whole and
        its deployment (the cumulative counters Prometheus computes burn rates from)."""
        good = obs.is_good(targets)
        for deployment in (ALL, obs.deployment) if obs.deployment else (ALL,):
            counts = self.judged.get((obs.endpoint, deployment))
            if counts is None:
                counts = self.judged[(obs.endpoint, deployment)] = JudgedCounts()
            counts.requests += 1
            counts.good += good

    def _forget_judged(self) -> None:
        """Drop the counts of deployments the monitor no longer watches (a deployment id is not
        reused: its series would stay forever); an endpoint's own counts stay."""
        watched = set(self.monitor.scopes())
        for endpoint, deployment in list(self.judged):
            if deployment != ALL and (endpoint, deployment) not in watched:
                del self.judged[(endpoint, deployment)]

    def _remember(self, batch_id: str) -> bool:
        """True when `batch_id` was seen already (a redelivery); remembers it otherwise."""
        if batch_id in self._seen_batches:
            return True
        self._seen_batches[batch_id] = None
        while len(self._seen_batches) > self.settings.dedup_batches:
            self._seen_batches.popitem(last=False)
        return False

    def _warn_unreachable(self, endpoint: str, targets: Slo) -> None:
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
        drift_every = self.settings.drift_check_interval_s * self.settings.time_scale
        while not self.stopping.is_set():
            now = time.time()
            self.evaluate_and_queue(now)
            if self.settings.drift and now >= self._next_drift_check:
                self.check_drift_and_queue(now)
                self._next_drift_check = now + drift_every
            await self._flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), interval)
        await self._flush()

    def evaluate_and_queue(self, now: float) -> list[Decision]:
        """Evaluate every rule at `now` and queue the events of the decisions."""
        decisions = self.monitor.evaluate(now)
        self._forget_judged()
        for decision in decisions:
            self.outbox.append(self._event(decision))
            self.alerts.enqueue(decision, self.receivers_for(decision.key.endpoint))
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
        targets = self.monitor.targets(key.endpoint) or self.slo_for(key.endpoint)
        latency = self.monitor.latency(key.endpoint, key.deployment, now=now, window_s=rule.long_window_s)
        payload = incident_payload(decision, latency=latency, targets=targets)
        if isinstance(decision, Breach):
            kind, severity, cause = EventKind.SLA_BREACH, EVENT_SEVERITY[rule.severity], ""
        else:  # a resolution is caused by its breach
            kind, severity = EventKind.SLA_RESOLVED, common_pb2.SEVERITY_INFO
            cause = incident_event_id(incident.breach_id, EventKind.SLA_BREACH)
        event = new_event(
            kind,
            endpoint=key.endpoint,
            source=self.name,
            payload_message=payload,
            severity=severity,
            cause_id=cause,
            endpoint_uid=self.registry.uid_of(key.endpoint),
        )
        event.id = incident_event_id(incident.breach_id, kind)  # stable: a republish is dropped by JetStream
        self.log.info(
            f"{kind.value}",
            endpoint=key.endpoint,
            deployment=key.deployment,
            rule=rule.name,
            breach_id=incident.breach_id,
            burn_rate=round(evaluation.long.burn_rate, 3),
            short_burn_rate=round(evaluation.short.burn_rate, 3),
        )
        return event

    # --- status ------------------------------------------------------------------------------
    def slo_rows(self, now: float | None = None) -> list[SloRow]:
        """Every watched (endpoint, deployment) with its status-window figures and burn rates."""
        now = time.time() if now is None else now
        window_s = self.settings.status_window_s * self.settings.time_scale
        rows: list[SloRow] = []
        for endpoint, deployment in self.monitor.scopes():
            targets = self.monitor.targets(endpoint) or self.slo_for(endpoint)
            entry = self.registry.get(endpoint)
            rows.append(
                SloRow(
                    endpoint=endpoint,
                    deployment=deployment,
                    stats=self.monitor.latency(endpoint, deployment, now=now, window_s=window_s),
                    targets=targets,
                    slo_source="endpoints" if entry is not None and entry.slo is not None else "default",
                    burn=self.monitor.burn_rates(endpoint, deployment, now=now),
                )
            )
        return rows

    def read_stats(self, now: float | None = None) -> SlaMonitorStats:
        """The state and counts now (`stats.py`): what `details()` and the metrics render."""
        now = time.time() if now is None else now
        return SlaMonitorStats(
            window_s=self.settings.status_window_s * self.settings.time_scale,
            rows=self.slo_rows(now),
            rules=self.monitor.config.rules,
            open_incidents=self.monitor.open_incidents(),
            judged=dict(sorted(self.judged.items())),
            drift={
                endpoint: DriftStatus(
                    state=tracker.state,
                    reference=tracker.source,
                    reference_requests=tracker.detector.reference.requests or tracker.learnt_requests,
                    findings=tracker.findings,
                )
                for endpoint, tracker in self.drift.items()
            },
            drift_findings=dict(self.drift_findings),
            drift_events=self.drift_events,
            counters=self.monitor.counters,
            duplicate_batches=self.duplicate_batches,
            consumer=self.telemetry_consumer,
            events_published=self.published,
            events_pending=len(self.outbox),
            endpoints_in_registry=len(self.registry),
            receivers=self.alerts.details(),
            metrics_url=self.metrics_url(),
        )

    def details(self) -> dict[str, Any]:
        return self.read_stats().details()
