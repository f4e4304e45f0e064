"""The sla-monitor service: live percentiles, burn-rate SLO alerts (`sla.breach`, `sla.resolved`)
and workload drift (`drift.detected`).

A thin shell around the pure cores (`monitor.py`, `drift.py`, `registry.py`): a durable consumer on
`evertune.telemetry.>` feeds finished requests into the windows and each endpoint's drift detector;
an evaluation loop runs every rule each `evaluate_interval_s` (and the drift checks each
`drift_check_interval_s`) and publishes the decisions. Events wait in an outbox until published;
their ids are derived from what they report, so a republished event is stored once by JetStream.
Each decision is also queued for the alert receivers (`receivers.py`: Alertmanager, PagerDuty,
plain webhooks, log lines), delivered by tasks of their own. The deployer's `endpoints` KV bucket is
watched for each endpoint's SLO, alert routes and stable deployment; `profile.ready` events give
drift its reference. Prometheus metrics are served on `metrics_port` (`metrics.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar

from evertune.sla_monitor.alerts import Breach, Decision, Resolved
from evertune.sla_monitor.burn_rate import RuleEvaluation, unreachable_rules
from evertune.sla_monitor.drift import DriftReference, DriftReport, DriftSample, EndpointDrift
from evertune.sla_monitor.metrics import ALL, SlaMonitorCollector
from evertune.sla_monitor.monitor import MonitorConfig, SlaMonitor
from evertune.sla_monitor.payloads import ReceiverConfig
from evertune.sla_monitor.receivers import AlertDispatcher
from evertune.sla_monitor.registry import EndpointRegistry
from evertune.sla_monitor.settings import SlaMonitorSettings
from evertune.sla_monitor.window import Observation, WindowStats, p99_gap
from evertune.sla_monitor.wiring import wiring
from google.protobuf.duration_pb2 import Duration
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from google.protobuf.timestamp_pb2 import Timestamp
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
from evertune.v1 import common_pb2, endpoint_pb2, events_pb2, telemetry_pb2

_SEVERITY = {"page": common_pb2.SEVERITY_CRITICAL, "ticket": common_pb2.SEVERITY_WARNING}


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


def drift_sample(record: telemetry_pb2.RequestRecord) -> DriftSample | None:
    """A RequestRecord as drift detection sees it; None for a request that was not served (an
    error, or no prompt length reported): drift watches the workload that was served."""
    if record.error_class or record.status_code >= 400 or record.prompt_tokens <= 0:
        return None
    return DriftSample(
        time_s=record.start_time_unix_ns / 1e9,
        prompt_tokens=record.prompt_tokens,
        output_tokens=record.completion_tokens,
        prefix_hashes=tuple(record.prefix_hashes),
        prefix_block_tokens=record.prefix_block_tokens,
        ttft_ms=record.ttft_ms,
    )


def profile_from_ready(
    ready: events_pb2.ProfileReady, *, min_requests: int, prefix_horizon_s: float
) -> DriftReference | None:
    """The drift reference a `profile.ready` carries, or None when it carries too little: fewer than
    `min_requests` requests, no summary, or neither a rate nor a prompt median.

    Its prefix reuse share is used only when it was measured with our cache horizon (within 1%, or
    the profile does not say): a share over another horizon is a different quantity."""
    summary = ready.summary
    if ready.request_count < min_requests or not ready.HasField("summary"):
        return None
    if summary.rate_rps <= 0 and summary.prompt_tokens_p50 <= 0:
        return None
    start = ready.window_start.ToNanoseconds() / 1e9
    span = max(0.0, ready.window_end.ToNanoseconds() / 1e9 - start)
    horizon = summary.prefix_horizon_s
    # 0 reuse is read as "not measured" (a profile without prefix hashes reports 0 as well)
    same_horizon = horizon <= 0 or abs(horizon - prefix_horizon_s) <= 0.01 * prefix_horizon_s
    return DriftReference.from_summary(
        requests=int(ready.request_count),
        span_s=span,
        rate_rps=summary.rate_rps,
        prompt_p50=summary.prompt_tokens_p50,
        output_p50=summary.completion_tokens_p50,
        prefix_reuse_share=summary.prefix_reuse_share
        if same_horizon and summary.prefix_reuse_share > 0
        else None,
        profile_id=ready.profile_id,
        start_s=start,
    )


def drift_event_id(report: DriftReport) -> str:
    """Stable id of the drift.detected of `report` (endpoint, check time, features)."""
    features = ",".join(sorted(f.feature for f in report.findings))
    text = f"{report.endpoint}:drift:{round(report.time_s * 1000)}:{features}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def drift_payload(report: DriftReport) -> events_pb2.DriftDetected:
    """The DriftDetected of a report: one DriftSignal per finding, saying exactly what was measured."""
    signals = []
    for f in report.findings:
        signal = events_pb2.DriftSignal(
            feature=f.feature,
            statistic=f.test,
            score=f.statistic,
            threshold=f.critical_value,
            reference_value=f.reference_value,
            current_value=f.live_value,
            measure=f.measure,
            relative_change=f.relative_change,
            min_change=f.min_change,
            current_requests=f.live_requests,
            reference_requests=f.reference_requests,
            current_window=_duration(f.live_window_s),
        )
        if f.p_value is not None:
            signal.p_value = f.p_value
        if f.p_value_threshold is not None:
            signal.p_value_threshold = f.p_value_threshold
        signals.append(signal)
    return events_pb2.DriftDetected(
        reference_profile_id=report.reference_profile_id,
        reference_window=_duration(report.reference_span_s),
        current_window=_duration(max(f.live_window_s for f in report.findings)),
        signals=signals,
    )


def drift_summary(report: DriftReport) -> str:
    """One line for a person: what moved, by how much, and the test."""
    parts = [
        f"{f.feature} {f.measure} {f.reference_value:.4g} -> {f.live_value:.4g} "
        f"({f.relative_change:+.0%}, {f.test})"
        for f in report.findings
    ]
    return f"workload drift on {report.endpoint}: " + "; ".join(parts)


@dataclass(frozen=True)
class SloRow:
    """One (endpoint, deployment) of `evertune slo status` and the metrics."""

    endpoint: str  #: endpoint name
    deployment: str  #: deployment id; "" for the endpoint as a whole
    stats: WindowStats | None  #: percentiles and counts over the status window
    targets: Slo  #: the SLO applied
    slo_source: str  #: "endpoints" (the deployer's bucket) or "default" (settings)
    burn: list[RuleEvaluation] = field(default_factory=list)  #: every rule evaluated now


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


@dataclass
class JudgedCounts:
    """Requests the monitor observed in one scope, and the good ones among them (cumulative)."""

    requests: int = 0
    good: int = 0


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
        self.metrics_registry.register(SlaMonitorCollector(self))

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
            body={
                "kind": EventKind.DRIFT_DETECTED.value,
                "id": event.id,
                "endpoint": report.endpoint,
                "summary": summary,
                "reference_source": report.reference_source,
                **MessageToDict(payload),
            },
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
        stats = self.monitor.latency(key.endpoint, key.deployment, now=now, window_s=rule.long_window_s)
        long = evaluation.long
        attainment = long.attainment if long.attainment is not None else 1.0
        # 0 on the wire: nothing measured in the window
        ttft_p99_ms = (stats.ttft_p99_ms if stats else None) or 0.0
        itl_p99_ms = (stats.itl_p99_ms if stats else None) or 0.0
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
                observed_ttft_p99_ms=ttft_p99_ms,
                target_ttft_p99_ms=targets.ttft_ms,
                observed_itl_p99_ms=itl_p99_ms,
                target_itl_p99_ms=targets.itl_wire_ms,
                observed_attainment=attainment,
                attainment_target=targets.share,
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
                observed_ttft_p99_ms=ttft_p99_ms,
                observed_attainment=attainment,
            )
            severity = common_pb2.SEVERITY_INFO
        # a breach is a root; its resolution names it as its cause
        cause = _event_id(incident.breach_id, EventKind.SLA_BREACH) if kind == EventKind.SLA_RESOLVED else ""
        event = new_event(
            kind,
            endpoint=key.endpoint,
            source=self.name,
            payload_message=payload,
            severity=severity,
            cause_id=cause,
            endpoint_uid=self.registry.uid_of(key.endpoint),
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

    def details(self) -> dict[str, Any]:
        now = time.time()
        window_s = self.settings.status_window_s * self.settings.time_scale
        endpoints: dict[str, Any] = {}
        open_keys = self.monitor.open_incidents()
        for row in self.slo_rows(now):
            stats = row.stats
            if stats is None:
                continue
            entry = endpoints.setdefault(row.endpoint, {"deployments": {}})
            figures: dict[str, Any] = {
                "requests": stats.requests,
                "attainment": stats.attainment,
                "ttft_p50_ms": stats.ttft_p50_ms,
                "ttft_p90_ms": stats.ttft_p90_ms,
                "ttft_p99_ms": stats.ttft_p99_ms,
                "itl_p99_ms": stats.itl_p99_ms,
                "burn_rates": {
                    ev.rule.name: {
                        "long": ev.long.burn_rate,
                        "short": ev.short.burn_rate,
                        "threshold": ev.rule.burn_rate,
                        "long_window_s": ev.rule.long_window_s,
                        "short_window_s": ev.rule.short_window_s,
                        "open": any(
                            k.endpoint == row.endpoint
                            and k.deployment == row.deployment
                            and k.rule == ev.rule.name
                            for k in open_keys
                        ),
                    }
                    for ev in row.burn
                },
            }
            if row.deployment:
                entry["deployments"][row.deployment] = figures
            else:
                entry.update(figures)
                entry["slo"] = {
                    "ttft_p99_ms": row.targets.ttft_ms,
                    "itl_p99_ms": row.targets.itl_wire_ms,
                    "attainment_target": row.targets.share,
                    "source": row.slo_source,
                }
                tracker = self.drift.get(row.endpoint)
                if tracker is not None:
                    entry["drift"] = {
                        "state": tracker.state,
                        "reference": tracker.source,
                        "reference_requests": tracker.detector.reference.requests or tracker.learnt_requests,
                        "findings": tracker.findings,
                    }
        incidents = [
            {
                "endpoint": key.endpoint,
                "deployment": key.deployment,
                "rule": key.rule,
                "breach_id": incident.breach_id,
                "since": incident.since,
            }
            for key, incident in open_keys.items()
        ]
        counters = self.monitor.counters
        consumer = self._consumer.stats if self._consumer else None
        return {
            "window_s": window_s,
            "endpoints_watched": len(endpoints),
            "endpoints": endpoints,
            "endpoints_in_registry": len(self.registry),
            "records_seen": counters.records,
            "records_dropped": counters.dropped,
            "duplicate_batches": self.duplicate_batches,
            "batches_acked": consumer.acked if consumer else 0,
            "batches_poisoned": consumer.poisoned if consumer else 0,
            "active_incidents": incidents,
            "breaches": counters.breaches,
            "resolved": counters.resolved,
            "drift_events": self.drift_events,
            "events_published": self.published,
            "events_pending": len(self.outbox),
            "receivers": self.alerts.details(),
            "metrics_url": self.metrics_url(),
        }
