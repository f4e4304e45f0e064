"""The sla-monitor's place in the loop: telemetry in, breaches and drift out; the deployer's
endpoints give each endpoint its SLO, and the profiler's latest profile is each endpoint's drift
reference (so a drift it reports comes back to it as the profile built for that drift)."""

from evertune.infra.bus import ConsumerSpec
from evertune.infra.bus.wiring import Consumes, Delivery, Wiring
from evertune.infra.events import EventKind, event_filter_subject
from evertune.sla_monitor.settings import SlaMonitorSettings


def wiring(settings: SlaMonitorSettings) -> Wiring:
    """What the sla-monitor subscribes to and publishes (no store); the endpoints watch only with
    a bucket named, the profiles only with drift on."""
    endpoints = (
        (
            Consumes(
                Delivery.KV_WATCH, source=settings.endpoints_bucket, subject="", handler="_apply_endpoint"
            ),
        )
        if settings.endpoints_bucket
        else ()
    )
    profiles = (
        (
            Consumes(
                Delivery.LATEST,
                source="EVENTS",
                subject=event_filter_subject(EventKind.PROFILE_READY),
                handler="_on_profile",
            ),
        )
        if settings.drift
        else ()
    )
    telemetry = ConsumerSpec(
        stream="TELEMETRY",
        durable=settings.durable,
        filter_subject=settings.subject,
        fetch_timeout_s=settings.fetch_wait_s * settings.time_scale,
    )
    return Wiring(
        service="sla-monitor",
        consumes=(*endpoints, *profiles, Consumes.durable_of(telemetry, "_on_batch")),
        events=(EventKind.SLA_BREACH, EventKind.SLA_RESOLVED, EventKind.DRIFT_DETECTED),
    )
