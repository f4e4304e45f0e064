"""The searcher's place in the loop: a `profile.ready` (or a StartSearch call) starts a search on
the profile the profiler stored (`profiles`); it publishes trial jobs per hardware class, hears
their `trial.completed`, stores the search (`searches`) and announces `search.started` and
`search.completed` (the deployer rolls the winner out)."""

from evertune.infra.bus import ConsumerSpec
from evertune.infra.bus.wiring import Consumes, Delivery, Wiring
from evertune.infra.events import EventKind, event_filter_subject


def _events(kind: EventKind, durable: str, *, ack_wait_s: float) -> ConsumerSpec:
    return ConsumerSpec(
        stream="EVENTS", durable=durable, filter_subject=event_filter_subject(kind), ack_wait_s=ack_wait_s
    )


def wiring(durable_prefix: str = "searcher") -> Wiring:
    """What the searcher subscribes to, publishes, reads and writes (`durable_prefix` names its
    durable consumers `<prefix>-trials`, `-profiles`, `-deletions`)."""
    p = durable_prefix
    return Wiring(
        service="searcher",
        consumes=(
            Consumes.durable_of(
                _events(EventKind.TRIAL_COMPLETED, f"{p}-trials", ack_wait_s=30.0), "trials.on_completed"
            ),
            Consumes.durable_of(
                _events(EventKind.PROFILE_READY, f"{p}-profiles", ack_wait_s=60.0), "_on_profile"
            ),
            Consumes.durable_of(
                _events(EventKind.ENDPOINT_DELETED, f"{p}-deletions", ack_wait_s=60.0), "_on_deleted"
            ),
            Consumes(
                Delivery.ON_DEMAND,
                source="EVENTS",
                subject=event_filter_subject(),
                handler="WatchSearch",
            ),
        ),
        events=(EventKind.SEARCH_STARTED, EventKind.SEARCH_COMPLETED),
        subjects=("evertune.jobs.<hardware_class>",),
        reads_buckets=("endpoints", "deployments"),
        reads_tables=("profiles", "trials", "searches"),
        writes_tables=("searches",),
    )
