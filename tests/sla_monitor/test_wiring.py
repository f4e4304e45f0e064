"""The service's wiring on the session's NATS: SLOs and alert routes from the real `endpoints` KV
bucket, drift.detected from live telemetry, a profile.ready reference, and a real /metrics scrape."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import aiohttp
import numpy as np
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from prometheus_client.parser import text_string_to_metric_families

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import Bucket, publish, publish_event
from evertune.infra.events import EventKind, event_filter_subject, new_event
from evertune.infra.nats_server import free_port
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings, load_settings
from evertune.sla_monitor import SlaMonitorService, SlaMonitorSettings
from evertune.sla_monitor.burn_rate import BurnRateRule
from evertune.sla_monitor.drift import DriftFinding
from evertune.sla_monitor.endpoint_drift import DriftReport
from evertune.sla_monitor.payloads import drift_event_id, drift_payload, profile_from_ready
from evertune.sla_monitor.registry import EndpointRegistry, receivers_from_routes
from evertune.v1 import common_pb2, endpoint_pb2, events_pb2, telemetry_pb2
from tests.sla_monitor.test_receivers import Receiver


def _endpoint(name: str, *, ttft_ms: float, routes: list[endpoint_pb2.AlertRoute], stable: str) -> bytes:
    spec = endpoint_pb2.EndpointSpec(
        name=name,
        model="m",
        slo=endpoint_pb2.Slo(ttft_p99_ms=ttft_ms, itl_p99_ms=0, attainment_target=0.9),
        alert_routes=routes,
    )
    return endpoint_pb2.Endpoint(spec=spec, stable_deployment_id=stable, revision=1).SerializeToString()


def test_registry_maps_routes_and_falls_back() -> None:
    routes = [
        endpoint_pb2.AlertRoute(
            name="oncall",
            kind=endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK,
            url="http://127.0.0.1:9/hook",
            min_severity=common_pb2.SEVERITY_CRITICAL,
            event_kinds=["sla.breach", "sla.resolved"],
        ),
        endpoint_pb2.AlertRoute(name="audit", kind=endpoint_pb2.ALERT_ROUTE_KIND_LOG),
        endpoint_pb2.AlertRoute(name="bad", kind=endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK, url="ftp://x"),
        endpoint_pb2.AlertRoute(name="unset"),
    ]
    hook, log = receivers_from_routes("voice", routes)
    assert (hook.kind, hook.name, hook.min_severity, hook.event_kinds) == (
        "webhook",
        "voice/oncall",
        "critical",
        ("sla.breach", "sla.resolved"),
    )
    assert not hook.takes("drift.detected") and hook.takes("sla.breach")
    assert (log.kind, log.min_severity) == ("log", "warning") and log.takes("drift.detected")
    paging = [
        endpoint_pb2.AlertRoute(
            name="am", kind=endpoint_pb2.ALERT_ROUTE_KIND_ALERTMANAGER, url="http://am:9093/x"
        ),
        endpoint_pb2.AlertRoute(
            name="pd", kind=endpoint_pb2.ALERT_ROUTE_KIND_PAGERDUTY, routing_key="R0UTING"
        ),
        endpoint_pb2.AlertRoute(name="pd-nokey", kind=endpoint_pb2.ALERT_ROUTE_KIND_PAGERDUTY),
        endpoint_pb2.AlertRoute(name="am-nourl", kind=endpoint_pb2.ALERT_ROUTE_KIND_ALERTMANAGER),
    ]
    am, pd = receivers_from_routes("voice", paging)
    assert (am.kind, am.target, am.name) == ("alertmanager", "http://am:9093/x", "voice/am")
    assert (pd.kind, pd.routing_key, pd.target) == (
        "pagerduty",
        "R0UTING",
        "https://events.pagerduty.com/v2/enqueue",
    )
    assert pd.takes("sla.breach") and not pd.takes("drift.detected")
    registry = EndpointRegistry()
    assert not registry.put(
        "voice", _endpoint("voice", ttft_ms=300, routes=routes, stable="d1")
    ).deployment_changed
    entry = registry.get("voice")
    assert entry is not None and entry.slo is not None and entry.slo.ttft_p99_ms == 300
    assert registry.put("voice", _endpoint("voice", ttft_ms=300, routes=[], stable="d2")).deployment_changed
    registry.put("voice", None)
    assert "voice" not in registry


def _records(endpoint: str, n: int, *, ttft_ms: float, rng: np.random.Generator, prompt_scale: float = 1.0):  # type: ignore[no-untyped-def]
    now_ns = time.time_ns()
    return [
        telemetry_pb2.RequestRecord(
            request_id=uuid.uuid4().hex,
            endpoint=endpoint,
            deployment="dep-a",
            start_time_unix_ns=now_ns - int((ttft_ms + 100) * 1e6) + i * 1000,
            status_code=200,
            stream=True,
            ttft_ms=float(ttft_ms * rng.lognormal(0, 0.1)),
            e2e_ms=ttft_ms + 100,
            itl_ms=[10.0] * 10,
            prompt_tokens=max(1, round(prompt_scale * float(rng.lognormal(np.log(800), 0.5)))),
            completion_tokens=11,
        )
        for i in range(n)
    ]


async def _publish(js: JetStreamContext, endpoint: str, records: list[telemetry_pb2.RequestRecord]) -> None:
    batch = telemetry_pb2.RequestRecordBatch(records=records, batch_id=uuid.uuid4().hex, source="test")
    await publish(js, f"evertune.telemetry.{endpoint}", batch, msg_id=batch.batch_id)


@pytest.fixture
async def rx() -> AsyncIterator[Receiver]:
    receiver = Receiver(free_port())
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.stop()


def _settings(endpoint: str, **overrides: object) -> SlaMonitorSettings:
    values: dict[str, object] = {
        "durable": f"sla-test-{uuid.uuid4().hex[:10]}",
        "subject": f"evertune.telemetry.{endpoint}",
        "evaluate_interval_s": 0.1,
        "slot_s": 0.5,
        "sketch_history_s": 10,
        "resolve_hold_s": 1.0,
        "min_requests": 10,
        "rules": [BurnRateRule(name="page-fast", long_window_s=4, short_window_s=1, burn_rate=6.0)],
        "ttft_p99_ms": 5000.0,  # the default would never be breached by these tests' traffic
        "itl_p99_ms": 0,
        "metrics_port": 0,
        **overrides,
    }
    return load_settings(SlaMonitorSettings, **values)


async def test_slo_and_routes_come_from_the_endpoints_bucket(
    nc: Client, js: JetStreamContext, rx: Receiver
) -> None:
    endpoint = f"ep-{uuid.uuid4().hex[:10]}"
    bucket = await Bucket.open(js, "endpoints")
    route = endpoint_pb2.AlertRoute(name="oncall", kind=endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK, url=rx.url)
    await bucket.mutate(
        endpoint, lambda _: _endpoint(endpoint, ttft_ms=200.0, routes=[route], stable="dep-a")
    )
    settings = _settings(endpoint, drift=False)
    service = SlaMonitorService(settings)
    await service.start(ServiceContext(shared=load_settings(SharedSettings), nc=nc, js=js, store=None))
    rng = np.random.default_rng(1)
    try:
        assert service.registry_loaded.is_set()
        assert service.slo_for(endpoint).ttft_ms == 200.0  # the bucket's, not the 5000 default
        assert service.slo_for("not-registered").ttft_ms == 5000.0
        assert [r.name for r in service.receivers_for(endpoint)] == [f"{endpoint}/oncall"]
        # 800 ms TTFT breaches the bucket's 200 ms target: the breach goes to the route's webhook
        deadline = time.monotonic() + 15
        while not rx.bodies:
            assert time.monotonic() < deadline, "no alert reached the endpoint's webhook"
            await _publish(js, endpoint, _records(endpoint, 20, ttft_ms=800.0, rng=rng))
            await asyncio.sleep(0.1)
        body = rx.bodies[0]
        assert body["kind"] == "sla.breach" and body["endpoint"] == endpoint
        assert service.details()["endpoints"][endpoint]["slo"]["source"] == "endpoints"

        # a changed SLO in the bucket applies to the next records
        await bucket.mutate(
            endpoint, lambda _: _endpoint(endpoint, ttft_ms=2000.0, routes=[route], stable="dep-a")
        )
        await eventually(
            lambda: service.slo_for(endpoint).ttft_ms == 2000.0, timeout_s=5, what="the SLO update"
        )
        # the endpoint deleted from the bucket: back to the settings' SLO and receivers (none)
        entry = await bucket.get(endpoint)
        assert entry is not None
        await bucket.delete(endpoint)
        await eventually(lambda: endpoint not in service.registry, timeout_s=5, what="the delete")
        assert service.slo_for(endpoint).ttft_ms == 5000.0 and service.receivers_for(endpoint) == []

        # the metrics endpoint answers with the figures, and its port is in the status
        url = service.details()["metrics_url"]
        assert url.startswith("http://127.0.0.1:") and service.listen()["metrics"]
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()
        assert f'evertune_sla_ttft_p99_seconds{{deployment="all",endpoint="{endpoint}"}}' in text
        families = list(text_string_to_metric_families(text))  # (it parses as Prometheus text)
        assert not [
            f.name for f in families if f.type == "gauge" and any("quantile" in s.labels for s in f.samples)
        ]
        assert "evertune_sla_events_published_total 1.0" in text
        assert (
            f'evertune_sla_burn_rate{{deployment="all",endpoint="{endpoint}",rule="page-fast",window="long"}}'
            in text
        )
        assert (
            f'evertune_sla_open_incidents{{deployment="all",endpoint="{endpoint}",rule="page-fast"}} 1.0'
            in text
        )
        assert (
            f'evertune_sla_alert_deliveries_total{{kind="webhook",receiver="{endpoint}/oncall"}} 1.0' in text
        )
        assert "evertune_sla_breaches_total 1.0" in text
    finally:
        await service.stop(5.0)
        await js.delete_consumer("TELEMETRY", settings.durable)
        if await bucket.get(endpoint) is not None:
            await bucket.delete(endpoint)


async def test_prompt_length_shift_publishes_drift_detected(nc: Client, js: JetStreamContext) -> None:
    endpoint = f"ep-{uuid.uuid4().hex[:10]}"
    settings = _settings(
        endpoint,
        drift_reference_s=1.5,
        drift_check_interval_s=0.2,
        drift_window_requests=400,
        drift_min_requests=200,
        drift_cusum_warmup=200,
    )
    service = SlaMonitorService(settings)
    events: list[events_pb2.Event] = []
    got = asyncio.Event()

    async def on_event(msg: Msg) -> None:
        events.append(events_pb2.Event.FromString(msg.data))
        got.set()

    sub = await js.subscribe(
        event_filter_subject(EventKind.DRIFT_DETECTED, endpoint),
        stream="EVENTS",
        ordered_consumer=True,
        cb=on_event,
    )
    await service.start(ServiceContext(shared=load_settings(SharedSettings), nc=nc, js=js, store=None))
    rng = np.random.default_rng(2)
    try:
        for _ in range(25):  # 2.5 s of the reference workload: learnt, then watched
            await _publish(js, endpoint, _records(endpoint, 20, ttft_ms=100.0, rng=rng))
            await asyncio.sleep(0.1)
        tracker = service.drift[endpoint]
        assert tracker.state == "watching" and tracker.source == "traffic" and not events
        deadline = time.monotonic() + 15
        while not got.is_set():  # prompts 1.6x longer
            assert time.monotonic() < deadline, "no drift.detected"
            await _publish(js, endpoint, _records(endpoint, 20, ttft_ms=100.0, rng=rng, prompt_scale=1.6))
            await asyncio.sleep(0.1)
        event = events[0]
        assert event.source == "sla-monitor" and event.severity == common_pb2.SEVERITY_WARNING
        drift = event.drift_detected
        signal = next(s for s in drift.signals if s.feature == "prompt_tokens")
        assert signal.statistic == "ks" and signal.measure == "median"
        assert abs(signal.score) > signal.threshold > 0 and signal.p_value < signal.p_value_threshold == 0.001
        assert signal.relative_change > 0.15 and signal.min_change == 0.15
        assert signal.current_value > signal.reference_value > 0
        assert drift.reference_profile_id == "" and drift.reference_window.ToMilliseconds() > 1000
        assert service.details()["drift_events"] >= 1
        assert service.drift_findings[(endpoint, "prompt_tokens")] >= 1

        # a profile.ready for the endpoint becomes its reference
        ready = events_pb2.ProfileReady(
            profile_id="prof-xyz",
            request_count=5000,
            summary=events_pb2.WorkloadSummary(
                rate_rps=200, prompt_tokens_p50=1280, completion_tokens_p50=11
            ),
        )
        ready.window_start.FromSeconds(int(time.time()) - 25)
        ready.window_end.FromSeconds(int(time.time()))
        await publish_event(
            js, new_event(EventKind.PROFILE_READY, endpoint=endpoint, source="test", payload_message=ready)
        )

        def on_the_profile() -> bool:  # a function: the assert above narrowed `source` for mypy
            return tracker.source == "profile"

        await eventually(on_the_profile, timeout_s=5, what="the profile reference")
        assert tracker.detector.reference.profile_id == "prof-xyz"
        assert service.details()["endpoints"][endpoint]["drift"]["reference"] == "profile"
    finally:
        await service.stop(5.0)
        await sub.unsubscribe()
        await js.delete_consumer("TELEMETRY", settings.durable)


def test_profile_ready_with_too_little_is_not_a_reference() -> None:
    ready = events_pb2.ProfileReady(profile_id="p", request_count=10)
    assert profile_from_ready(ready, min_requests=500, prefix_horizon_s=300) is None
    ready = events_pb2.ProfileReady(profile_id="p", request_count=1000)  # no summary
    assert profile_from_ready(ready, min_requests=500, prefix_horizon_s=300) is None
    ready.summary.rate_rps = 2.0
    profile = profile_from_ready(ready, min_requests=500, prefix_horizon_s=300)
    assert profile is not None and profile.rate_rps == pytest.approx(2.0) and profile.median("prompt") is None
    # a reuse share over another cache horizon is not comparable: left out
    ready.summary.prefix_reuse_share, ready.summary.prefix_horizon_s = 0.6, 600
    profile = profile_from_ready(ready, min_requests=500, prefix_horizon_s=300)
    assert profile is not None and profile.prefix_reuse_share is None
    ready.summary.prefix_horizon_s = 300
    profile = profile_from_ready(ready, min_requests=500, prefix_horizon_s=300)
    assert profile is not None and profile.prefix_reuse_share == pytest.approx(0.6)


def _report(endpoint: str) -> DriftReport:
    """A drift report of one finding: TTFT doubled, by CUSUM."""
    finding = DriftFinding(
        feature="ttft_ms",
        test="cusum",
        statistic=11.0,
        p_value=None,
        reference_value=150.0,
        live_value=300.0,
        relative_change=1.0,
        time_s=1_700_000_000.0,
        live_requests=9,
        reference_requests=1000,
        measure="geometric_mean",
        critical_value=10.0,
        live_window_s=2.0,
    )
    return DriftReport(endpoint, 1_700_000_000.0, (finding,), "", "traffic", 600.0, 3000)


def test_drift_event_ids_are_stable_and_signals_complete() -> None:
    report = _report("ep")
    assert drift_event_id(report) == drift_event_id(report) and len(drift_event_id(report)) == 32
    [signal] = drift_payload(report).signals
    assert signal.statistic == "cusum" and signal.measure == "geometric_mean" and signal.threshold == 10
    assert not signal.HasField("p_value") and not signal.HasField("p_value_threshold")
    assert signal.current_window.ToMilliseconds() == 2000


def _incarnation(name: str, uid: str) -> bytes:
    endpoint = endpoint_pb2.Endpoint.FromString(_endpoint(name, ttft_ms=300, routes=[], stable="d1"))
    endpoint.uid = uid
    return endpoint.SerializeToString()


def test_a_name_created_again_is_a_new_endpoint_to_the_monitor() -> None:
    """The registry knows each endpoint's id; the name holding another id (or none) is a
    replacement: the old endpoint's drift baseline is dropped and its late records are not the new
    endpoint's workload. Events name the endpoint's id."""
    service = SlaMonitorService(_settings("voice"))
    registry = service.registry
    assert not registry.put("voice", _incarnation("voice", "ep-old")).replaced
    assert registry.uid_of("voice") == "ep-old" and registry.uid_of("other") == ""
    assert not registry.put("voice", _incarnation("voice", "ep-old")).replaced  # a change, same endpoint

    late = telemetry_pb2.RequestRecord(endpoint="voice", endpoint_uid="ep-old", prompt_tokens=10)
    service._drift_tracker("voice")
    service._apply_endpoint("voice", _incarnation("voice", "ep-new"))
    assert "voice" not in service.drift  # the old endpoint's baseline is gone
    assert service._stale(late)
    assert not service._stale(telemetry_pb2.RequestRecord(endpoint="voice", endpoint_uid="ep-new"))
    assert not service._stale(telemetry_pb2.RequestRecord(endpoint="voice"))  # a record without an id

    report = _report("voice")
    assert service._drift_event(report).endpoint_uid == "ep-new"
    assert registry.put("voice", None).replaced
