"""Who may publish and subscribe to what on NATS: one table, per service.

The embedded `evertune up` writes it into the nats-server configuration it generates
(`evertune.infra.nats_auth`), one user per service; a production NATS takes the same table
(`evertune.infra.nats_auth.authorization_block`). Derived from docs/contracts.md and the code:

- every service: the JetStream API (`$JS.API.>`, coarse: creating consumers and reading streams and
  buckets goes through it), acks and flow control (`$JS.ACK.>`, `$JS.FC.>`), replies to inboxes
  (`_INBOX.>`), the micro API (`$SRV.>`) and its own `evertune.svc.<service>.>` endpoints, and the
  poison-message report every durable consumer may publish (`service.poison_message._system`);
- events: each service publishes only the kinds it emits (docs/contracts.md, "Events"), so the
  gateway cannot forge a `search.completed`; telemetry only the gateway; jobs only the searcher;
- KV writes (`$KV.<bucket>.>`): the deployer's buckets, by the deployer only.
"""

from __future__ import annotations

from dataclasses import dataclass

from evertune.infra.events import EventKind

#: Every service may do these (see the module's docstring).
COMMON_PUBLISH: tuple[str, ...] = (
    "$JS.API.>",
    "$JS.ACK.>",
    "$JS.FC.>",
    "_INBOX.>",
    "$SRV.>",
    f"evertune.events.{EventKind.SERVICE_POISON_MESSAGE.value}._system",
)
COMMON_SUBSCRIBE: tuple[str, ...] = ("_INBOX.>", "$SRV.>")

#: The event kinds each service emits (docs/contracts.md, "Events").
EVENT_KINDS: dict[str, tuple[EventKind, ...]] = {
    "gateway": (),
    "profiler": (EventKind.PROFILE_READY,),
    "sla-monitor": (EventKind.SLA_BREACH, EventKind.SLA_RESOLVED, EventKind.DRIFT_DETECTED),
    "searcher": (EventKind.SEARCH_STARTED, EventKind.SEARCH_COMPLETED),
    "runner": (EventKind.TRIAL_PROGRESS, EventKind.TRIAL_COMPLETED),
    "deployer": (
        EventKind.DEPLOY_STARTED,
        EventKind.DEPLOY_CANARY_STEP,
        EventKind.DEPLOY_PROMOTED,
        EventKind.DEPLOY_ROLLED_BACK,
        EventKind.ENDPOINT_CREATED,
        EventKind.ENDPOINT_UPDATED,
        EventKind.ENDPOINT_DELETED,
    ),
}

#: Other subjects a service publishes: telemetry, jobs, KV writes.
EXTRA_PUBLISH: dict[str, tuple[str, ...]] = {
    "gateway": ("evertune.telemetry.>",),
    "searcher": ("evertune.jobs.>",),
    "deployer": ("$KV.endpoints.>", "$KV.deployments.>", "$KV.routes.>", "$KV.requests.>"),
}

#: Core (non-JetStream) subscriptions beyond inboxes and the micro API.
EXTRA_SUBSCRIBE: dict[str, tuple[str, ...]] = {
    "runner": (f"evertune.events.{EventKind.SEARCH_COMPLETED.value}.>",),  # cancels its search's jobs
}


@dataclass(frozen=True)
class Permissions:
    """The subjects one NATS user may publish and subscribe to (everything else is denied)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


def permissions_for(service: str) -> Permissions:
    """The table's row for `service` (a name of `EVENT_KINDS`); KeyError for any other name."""
    kinds = EVENT_KINDS[service]
    own = f"evertune.svc.{service}.>"
    return Permissions(
        publish=(
            *COMMON_PUBLISH,
            own,
            *(f"evertune.events.{kind.value}.>" for kind in kinds),
            *EXTRA_PUBLISH.get(service, ()),
        ),
        subscribe=(*COMMON_SUBSCRIBE, own, *EXTRA_SUBSCRIBE.get(service, ())),
    )


SERVICES: tuple[str, ...] = tuple(EVENT_KINDS)
