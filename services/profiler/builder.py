"""Building a profile from the store (the shell around the pure core): query, compute, store.

`build_from_store` runs the profile queries for one endpoint and window and the pure core over
their results (profile, bottleneck report, trace). `create_profile` also numbers, stores and
describes the result as a `StoredProfile`, ready to announce as `profile.ready`.

A profile is of one endpoint id (Endpoint.uid): only requests recorded under it are read. Without
an id given, `resolve_endpoint_uid` picks the id of the name's newest request in the window, so a
name deleted and created again is profiled as its newest incarnation, never as a mix.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from evertune.domain.workloads.jsonl import TraceRecord
from evertune.infra.store import Store
from evertune.profiler import catalog
from evertune.profiler.bottleneck import EngineFigures, bottleneck_report
from evertune.profiler.profile import (
    NO_BOTTLENECK,
    ProfileConfig,
    RequestSample,
    WindowAggregates,
    WorkloadProfile,
    build_profile,
    chain_structure,
    in_flight_at_arrival,
)
from evertune.profiler.queries import newest_endpoint_uid, request_samples, window_aggregates
from evertune.profiler.trace_export import trace_records, trace_sha256, trace_text


@dataclass(frozen=True)
class Built:
    """A profile and its trace, not stored yet."""

    profile: WorkloadProfile  #: the figures
    records: list[TraceRecord]  #: the replayable trace

    @property
    def endpoint_uid(self) -> str:
        """The endpoint id whose requests it describes."""
        return self.profile.endpoint_uid


async def resolve_endpoint_uid(store: Store, endpoint: str, since: datetime, until: datetime) -> str | None:
    """The endpoint id a profile of `endpoint` is of when the asker names none: that of the name's
    newest request in `[since, until)` (`argMax(endpoint_uid, ts)`); with none in the window, of
    its newest request at any time; with no telemetry at all, that of its newest stored profile;
    None when the name has neither. '' (rows from before endpoints had ids) is an id like another:
    it selects only those rows."""
    uid = await newest_endpoint_uid(store, endpoint, since, until)
    if uid is None:
        uid = await newest_endpoint_uid(store, endpoint)
    if uid is None:
        stored = await catalog.latest(store, endpoint)
        uid = stored.endpoint_uid if stored is not None else None
    return uid


async def build_from_store(
    store: Store,
    *,
    endpoint: str,
    since: datetime,
    until: datetime,
    config: ProfileConfig,
    max_samples: int,
    endpoint_uid: str | None = None,
    engine: EngineFigures | None = None,
    notes: dict[str, str] | None = None,
) -> Built:
    """The profile of `endpoint` under the endpoint id `endpoint_uid` (None: `resolve_endpoint_uid`'s)
    over `[since, until)`: aggregates over the whole window in SQL, per-request figures and the trace
    over its most recent `max_samples` requests. Requests of other ids of the name are not read."""
    if endpoint_uid is None:
        endpoint_uid = await resolve_endpoint_uid(store, endpoint, since, until) or ""
    aggregates = await window_aggregates(
        store, endpoint, since, until, endpoint_uid=endpoint_uid, bins=config.histogram_bins
    )
    samples = (
        await request_samples(store, endpoint, since, until, endpoint_uid=endpoint_uid, limit=max_samples)
        if aggregates.requests
        else []
    )
    # The pure part takes seconds for 200k requests: off the event loop, so consumers keep going.
    return await asyncio.to_thread(
        _compute,
        endpoint=endpoint,
        endpoint_uid=endpoint_uid,
        since=since,
        until=until,
        aggregates=aggregates,
        samples=samples,
        config=config,
        engine=engine,
        notes=notes or {},
    )


def _compute(
    *,
    endpoint: str,
    endpoint_uid: str,
    since: datetime,
    until: datetime,
    aggregates: WindowAggregates,
    samples: list[RequestSample],
    config: ProfileConfig,
    engine: EngineFigures | None,
    notes: dict[str, str],
) -> Built:
    structure = chain_structure(samples, horizon_s=config.horizon_s)
    if samples or engine is not None:
        report = bottleneck_report(samples, engine=engine, in_flight=in_flight_at_arrival(samples))
    else:
        report = NO_BOTTLENECK
    profile = build_profile(
        endpoint=endpoint,
        window_start=since,
        window_end=until,
        aggregates=aggregates,
        samples=samples,
        config=config,
        bottleneck=report,
        structure=structure,
        endpoint_uid=endpoint_uid,
    )
    profile.extra.update(notes)
    records = trace_records(samples, block_tokens=config.block_tokens, structure=structure)
    return Built(profile=profile, records=records)


def profile_id_for(endpoint: str, cause_id: str, endpoint_uid: str = "") -> str:
    """A new profile id; derived from the causing event's id and the endpoint id when there is a
    cause (so a redelivered event maps to the same profile, and a re-created name's profile never
    takes an old incarnation's id). Without an endpoint id, the form from before endpoints had ids."""
    if cause_id:
        key = f"{endpoint}\n{endpoint_uid}\n{cause_id}" if endpoint_uid else f"{endpoint}\n{cause_id}"
        return "prof-" + hashlib.sha256(key.encode()).hexdigest()[:24]
    return "prof-" + uuid.uuid4().hex[:24]


@dataclass
class CreateRequest:
    """What to profile and why."""

    endpoint: str  #: endpoint name
    since: datetime  #: window start (UTC)
    until: datetime  #: window end (UTC, exclusive)
    trigger: str  #: "schedule", "drift" or "api"
    created: datetime  #: now (UTC)
    cause_id: str = ""  #: id of the event that caused it
    #: the endpoint id to profile (Endpoint.uid); None: `resolve_endpoint_uid`'s (the newest in the window)
    endpoint_uid: str | None = None
    engine: EngineFigures | None = None  #: the engine's figures over the window, when scraped
    notes: dict[str, str] = field(default_factory=dict)  #: notes kept in the profile's `extra`


async def create_profile(
    store: Store, request: CreateRequest, *, config: ProfileConfig, max_samples: int
) -> catalog.StoredProfile:
    """Build, number and store a profile of one endpoint id; returns what was stored. Versions
    count per name (`catalog.next_version`)."""
    built = await build_from_store(
        store,
        endpoint=request.endpoint,
        since=request.since,
        until=request.until,
        config=config,
        max_samples=max_samples,
        endpoint_uid=request.endpoint_uid,
        engine=request.engine,
        notes=request.notes,
    )
    profile_id = profile_id_for(request.endpoint, request.cause_id, built.endpoint_uid)
    version = await catalog.next_version(store, request.endpoint)
    text = trace_text(built.records)
    digest = trace_sha256(text)
    ready = catalog.ready_message(
        built.profile,
        profile_id=profile_id,
        version=version,
        trigger=request.trigger,
        trace_uri=catalog.trace_uri(store.database, profile_id),
        trace_sha256=digest,
    )
    stored = catalog.StoredProfile(
        endpoint=request.endpoint,
        version=version,
        profile_id=profile_id,
        created=request.created,
        trigger=request.trigger,
        cause_id=request.cause_id,
        ready=ready,
        profile=built.profile,
        trace_jsonl=text,
        trace_sha256=digest,
        endpoint_uid=built.endpoint_uid,
    )
    await catalog.save(store, stored)
    return stored
