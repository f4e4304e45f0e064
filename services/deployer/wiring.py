"""The deployer's place in the loop: a `search.completed` with a verified winner rolls it out (a
canary judged on the gateway's telemetry in `requests`, the winner checked against `searches` and
`trials`), an `sla.breach` during a rollout rolls it back; it writes the endpoints, deployments and
route tables the gateway and the sla-monitor follow, and announces `deploy.*` and `endpoint.*`."""

from evertune.deployer.state import DEPLOYMENTS, ENDPOINTS, REQUESTS, ROUTES
from evertune.infra.bus import ConsumerSpec
from evertune.infra.bus.wiring import Consumes, Delivery, Wiring
from evertune.infra.events import EventKind, event_filter_subject

#: Durable consumer of `search.completed` (winners to roll out).
SEARCH_DURABLE = "deployer-search-completed"
#: Durable consumer of `sla.breach` (rollouts to roll back).
BREACH_DURABLE = "deployer-sla-breach"


def wiring() -> Wiring:
    """What the deployer subscribes to, publishes, reads and writes."""
    search = ConsumerSpec(
        stream="EVENTS",
        durable=SEARCH_DURABLE,
        filter_subject=event_filter_subject(EventKind.SEARCH_COMPLETED),
    )
    breach = ConsumerSpec(
        stream="EVENTS", durable=BREACH_DURABLE, filter_subject=event_filter_subject(EventKind.SLA_BREACH)
    )
    return Wiring(
        service="deployer",
        consumes=(
            Consumes.durable_of(search, "_on_search_completed"),
            Consumes.durable_of(breach, "_on_breach"),
            Consumes(
                Delivery.ON_DEMAND,
                source="EVENTS",
                subject=event_filter_subject(EventKind.TRIAL_COMPLETED),
                handler="Promote by trial",
            ),
            Consumes(
                Delivery.ON_DEMAND, source="EVENTS", subject=event_filter_subject(), handler="WatchEvents"
            ),
        ),
        events=(
            EventKind.DEPLOY_STARTED,
            EventKind.DEPLOY_CANARY_STEP,
            EventKind.DEPLOY_PROMOTED,
            EventKind.DEPLOY_ROLLED_BACK,
            EventKind.ENDPOINT_CREATED,
            EventKind.ENDPOINT_UPDATED,
            EventKind.ENDPOINT_DELETED,
        ),
        writes_buckets=(ENDPOINTS, DEPLOYMENTS, ROUTES, REQUESTS),
        reads_tables=("requests", "searches", "trials"),
    )
