"""Who may publish and subscribe to what on NATS: one table, per service.

The embedded `evertune up` writes it into the nats-server configuration it generates
(`evertune.infra.nats_auth`), one user per service; a production NATS takes the same table
(`evertune.infra.nats_auth.authorization_block`). Derived from docs/contracts.md and the code.

The rule: a user may publish what its service emits and call the JetStream API only for the reads
its job needs, stream by stream (a KV bucket `b` is the stream `KV_b`). Reading anything in
JetStream goes through that API (a consumer is created, then fetched from or pushed to an inbox; a
KV get asks the stream for one message), so a stream missing from a service's `READS` row cannot be
read with its credentials: the request is refused with a permissions violation.

- publishing: each service the event kinds it emits (docs/contracts.md, "Events"), so the gateway
  cannot forge a `search.completed`; telemetry only the gateway; jobs only the searcher; KV writes
  (`$KV.<bucket>.>`) the deployer's buckets, by the deployer only;
- reading (`READS`): `Pull` (durable pull consumers, or the deployer's short-lived lookup: create
  on the filter given, info, fetch, ack), `WATCH` (ordered push consumers: KV watches, event
  subscriptions; nats-py creates them through `$JS.API.CONSUMER.CREATE.<stream>`, whose subject
  carries no filter, so a watch can read the whole stream), `GET` (single messages: a KV get);
- declaring (`evertune run` declares every stream and bucket at start, as the service's user):
  every service may look up (`STREAM.INFO`) and create (`STREAM.CREATE`) each stream of
  `infra/nats/jetstream.toml` (a create never changes a stream that exists: the server refuses a
  different configuration); only the deployer may update one (`STREAM.UPDATE`: an update can make a
  stream republish or source another, i.e. read anything);
- every service: replies to inboxes (publishing `_INBOX.>`; it subscribes to its own only,
  `_INBOX.<service>.>`: `evertune.infra.bus.connect` gives a user that inbox prefix, so no service
  reads what another fetches), answering the micro API (subscribing `$SRV.>`,
  not asking it), its own `evertune.svc.<service>.>` endpoints, and the poison-message report
  every durable consumer may publish (`service.poison_message._system`). Nothing else: no
  `$JS.API.>`, no stream deletes or purges, no `$SRV.STATS` round over every service's status.

Consumer and bucket names are the services' defaults (the profiler's `profiler-drift`, the buckets
`routes`, `endpoints`, `deployments`): a deployment that renames one renames it here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from evertune.infra.events import EventKind

#: The JetStream API's subject prefix.
API = "$JS.API"

#: Streams evertune declares (`infra/nats/jetstream.toml`; a KV bucket `b` is the stream `KV_b`).
STREAMS: tuple[str, ...] = (
    "TELEMETRY",
    "EVENTS",
    "JOBS",
    "KV_endpoints",
    "KV_deployments",
    "KV_routes",
    "KV_requests",
)


@dataclass(frozen=True)
class Pull:
    """Pull consumers on `filter` (`>`: the whole stream) named `consumer` (`*`: any name)."""

    filter: str = ">"
    consumer: str = "*"


#: Ordered push consumers with any filter: KV watches (and key listings), event subscriptions.
WATCH = "watch"
#: Single messages by subject or sequence: a KV get.
GET = "get"

Read = Pull | str

#: The streams each service reads, and how (see the module's docstring).
READS: dict[str, dict[str, tuple[Read, ...]]] = {
    "gateway": {
        "KV_routes": (WATCH, GET),  # the route table it follows (a get shows no more than the watch)
    },
    "profiler": {
        "TELEMETRY": (Pull(),),  # the sink
        "EVENTS": (Pull("evertune.events.drift.detected.>", "profiler-drift"),),
        "KV_deployments": (WATCH, GET),  # the engines' /metrics URLs for a report
    },
    "sla-monitor": {
        "TELEMETRY": (Pull(),),
        "EVENTS": (WATCH,),  # the latest profile.ready per endpoint (drift baselines)
        "KV_endpoints": (WATCH,),  # SLOs and receivers
    },
    "searcher": {
        "EVENTS": (Pull(), WATCH),  # trial.completed, profile.ready, endpoint.deleted; WatchSearch
        "KV_endpoints": (GET,),
        "KV_deployments": (WATCH, GET),  # the winner's rollout
    },
    "runner": {
        "JOBS": (Pull(),),  # its hardware class's jobs (search.completed: a core subscription)
    },
    "deployer": {
        "EVENTS": (Pull(), WATCH),  # search.completed, sla.breach, a trial's config; WatchEvents
        "KV_endpoints": (WATCH, GET),
        "KV_deployments": (WATCH, GET),
        "KV_routes": (WATCH, GET),
        "KV_requests": (WATCH, GET),
    },
}

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

#: Other subjects a service publishes: telemetry, jobs, KV writes, and JetStream API calls that
#: are not reads.
EXTRA_PUBLISH: dict[str, tuple[str, ...]] = {
    "gateway": ("evertune.telemetry.>",),
    "searcher": ("evertune.jobs.>", f"{API}.STREAM.MSG.DELETE.JOBS"),  # withdraws jobs not taken
    "deployer": (
        "$KV.endpoints.>",
        "$KV.deployments.>",
        "$KV.routes.>",
        "$KV.requests.>",
        *(f"{API}.STREAM.UPDATE.{stream}" for stream in STREAMS),  # applies a changed definition
    ),
}

#: Core (non-JetStream) subscriptions beyond inboxes and the micro API.
EXTRA_SUBSCRIBE: dict[str, tuple[str, ...]] = {
    "runner": (f"evertune.events.{EventKind.SEARCH_COMPLETED.value}.>",),  # cancels its search's jobs
}

#: Every service may publish these (see the module's docstring).
COMMON_PUBLISH: tuple[str, ...] = (
    "_INBOX.>",
    f"evertune.events.{EventKind.SERVICE_POISON_MESSAGE.value}._system",
    *(f"{API}.STREAM.{verb}.{stream}" for stream in STREAMS for verb in ("INFO", "CREATE")),
)
COMMON_SUBSCRIBE: tuple[str, ...] = ("$SRV.>",)  #: and the user's own inboxes (`permissions_for`)


def read_subjects(stream: str, how: Read) -> tuple[str, ...]:
    """The subjects a user publishes to read `stream` the way `how` says."""
    if isinstance(how, Pull):
        # nats-py names the filter in the subject (`.<name>.<filter>`, `.<name>` for the whole
        # stream) and the server refuses a configuration whose filter differs from the subject's
        create = f"{API}.CONSUMER.CREATE.{stream}.{how.consumer}"
        creates = (create, f"{create}.>") if how.filter == ">" else (f"{create}.{how.filter}",)
        return (
            *creates,
            f"{API}.CONSUMER.INFO.{stream}.{how.consumer}",
            f"{API}.CONSUMER.MSG.NEXT.{stream}.{how.consumer}",
            f"$JS.ACK.{stream}.{how.consumer}.>",
        )
    if how == WATCH:
        return (
            f"{API}.CONSUMER.CREATE.{stream}",  # nats-py's ordered consumers: no name, no filter
            f"{API}.CONSUMER.INFO.{stream}.*",  # a watch's initial count (`read_initial_entries`)
            f"$JS.FC.{stream}.>",  # flow control replies
        )
    if how == GET:
        return (
            f"{API}.STREAM.MSG.GET.{stream}",
            f"{API}.DIRECT.GET.{stream}",  # a bucket made with allow_direct (`nats kv add`)
            f"{API}.DIRECT.GET.{stream}.>",
        )
    raise ValueError(f"unknown way to read {stream}: {how!r}")


@dataclass(frozen=True)
class Permissions:
    """The subjects one NATS user may publish and subscribe to (everything else is denied)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


def permissions_for(service: str) -> Permissions:
    """The table's row for `service` (a name of `EVENT_KINDS`); KeyError for any other name."""
    kinds = EVENT_KINDS[service]
    own = f"evertune.svc.{service}.>"
    reads = (s for stream, ways in READS[service].items() for how in ways for s in read_subjects(stream, how))
    return Permissions(
        publish=tuple(
            dict.fromkeys(
                (
                    *COMMON_PUBLISH,
                    own,
                    *(f"evertune.events.{kind.value}.>" for kind in kinds),
                    *EXTRA_PUBLISH.get(service, ()),
                    *reads,
                )
            )
        ),
        subscribe=(f"_INBOX.{service}.>", *COMMON_SUBSCRIBE, own, *EXTRA_SUBSCRIBE.get(service, ())),
    )


SERVICES: tuple[str, ...] = tuple(EVENT_KINDS)
