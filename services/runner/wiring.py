"""The runner's place in the loop: it takes the searcher's trial jobs for its hardware class,
replays the profile's stored trace, stores each trial (`trials`) and reports it
(`trial.progress`, `trial.completed`); a `search.completed` stops the trials of its search."""

from evertune.infra.bus import ConsumerSpec
from evertune.infra.bus.wiring import Consumes, Delivery, Wiring
from evertune.infra.events import EventKind, event_filter_subject
from evertune.runner.settings import RunnerSettings

#: Stream holding the work queues of every hardware class.
STREAM = "JOBS"
#: Nak delays (s) after the 1st, 2nd, ... failure to store or publish a result.
RETRY_DELAYS_S: tuple[float, ...] = (2.0, 10.0, 30.0)


def wiring(settings: RunnerSettings) -> Wiring:
    """What the runner subscribes to, publishes, reads and writes."""
    jobs = ConsumerSpec(
        stream=STREAM,
        durable=settings.durable,
        filter_subject=settings.subject,
        max_deliver=settings.max_deliver,
        ack_wait_s=settings.ack_wait_s,
        backoff_s=RETRY_DELAYS_S,
        batch=1,  # one trial at a time: the next job waits on the server for any runner
        fetch_timeout_s=settings.fetch_timeout_s,
        nak_on_stop=True,
    )
    return Wiring(
        service="runner",
        consumes=(
            Consumes(
                Delivery.CORE,
                source="",
                subject=event_filter_subject(EventKind.SEARCH_COMPLETED),
                handler="_on_search_completed",
            ),
            Consumes.durable_of(jobs, "_take"),
        ),
        events=(EventKind.TRIAL_PROGRESS, EventKind.TRIAL_COMPLETED),
        reads_tables=("trials", "profiles"),
        writes_tables=("trials",),
    )
