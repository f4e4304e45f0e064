"""The profiler's place in the loop: it writes every telemetry record to the store (`requests`),
builds a profile when the sla-monitor reports drift (or when asked, or on its schedule), stores it
(`profiles`, with its replayable trace) and announces it (`profile.ready`: the searcher searches
on it, the sla-monitor takes it as its drift reference)."""

from evertune.infra.bus import ConsumerSpec
from evertune.infra.bus.wiring import Consumes, Delivery, Wiring
from evertune.infra.events import EventKind
from evertune.profiler.settings import ProfilerSettings


def wiring(settings: ProfilerSettings) -> Wiring:
    """What the profiler subscribes to, publishes, reads and writes."""
    drift = ConsumerSpec(
        stream="EVENTS",
        durable=settings.drift_durable,
        filter_subject=settings.drift_subject,
        ack_wait_s=60.0,
    )
    return Wiring(
        service="profiler",
        consumes=(
            Consumes(
                Delivery.BATCHING,
                source="TELEMETRY",
                subject=settings.sink_subject,
                durable=settings.sink_durable,
                handler="sink",
            ),
            Consumes.durable_of(drift, "_on_drift"),
            Consumes(
                Delivery.CORE,
                source="",
                subject=settings.request_subject,
                queue="profiler",
                handler="_on_request",
            ),
        ),
        events=(EventKind.PROFILE_READY,),
        reads_buckets=(settings.deployments_bucket,) if settings.scrape_engines else (),
        reads_tables=("requests", "profiles"),
        writes_tables=("requests", "profiles"),
    )
