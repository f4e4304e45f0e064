"""Stored profiles: the `profiles` table (infra/clickhouse/0002_profiles.sql) and `ProfileReady`.

`ready_message` is the one conversion of a `WorkloadProfile` to the wire (`ProfileReady` with its
`WorkloadSummary` and `Bottleneck`s). `save` writes a `StoredProfile` (idempotent per profile id);
`latest`, `by_id` and `by_cause` read them back; `next_version` numbers an endpoint's profiles.

A profile belongs to an endpoint id (`endpoint_uid`, Endpoint.uid), not only to a name: a name
deleted and created again has a new id, and `latest`, `by_cause` and `known_endpoint` given an id
answer only that id's profiles. Versions still count per name (1, 2, ... across every id the name
has had: the simplest numbering that stays unique per name), so the new endpoint's first profile
may be version 5. Profiles stored before endpoints had ids (migration 0006) have '' and belong to
no id: a lookup with a (non-empty) id never returns them; only the id '' or no id at all does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.protobuf.json_format import MessageToJson, Parse

from evertune.infra.store import Store
from evertune.profiler.profile import WorkloadProfile, profile_from_jsonable, to_jsonable
from evertune.v1 import events_pb2

TABLE = "profiles"

COLUMNS: tuple[str, ...] = (
    "endpoint",
    "endpoint_uid",
    "version",
    "profile_id",
    "created",
    "window_start",
    "window_end",
    "trigger",
    "cause_id",
    "request_count",
    "ready_json",
    "profile_json",
    "trace_jsonl",
    "trace_sha256",
)


@dataclass(frozen=True)
class StoredProfile:
    """One row of `profiles`: a profile, its announcement and its trace."""

    endpoint: str  #: endpoint name
    version: int  #: 1, 2, ... per endpoint name (across its ids)
    profile_id: str  #: unique id ("prof-" + hex)
    created: datetime  #: when it was built (UTC)
    trigger: str  #: "schedule", "drift" or "api"
    cause_id: str  #: id of the event that caused it ("" for none)
    ready: events_pb2.ProfileReady  #: what `profile.ready` announces
    profile: WorkloadProfile  #: every figure
    trace_jsonl: str  #: the replayable trace, JSON lines
    trace_sha256: str  #: SHA-256 (hex) of `trace_jsonl`
    endpoint_uid: str = ""  #: the endpoint id whose requests it describes ('' before endpoints had ids)


def trace_uri(database: str, profile_id: str) -> str:
    """Where a stored profile's trace can be read: its row in the `profiles` table."""
    return f"clickhouse://{database}/{TABLE}?profile_id={profile_id}"


def ready_message(
    profile: WorkloadProfile,
    *,
    profile_id: str,
    version: int,
    trigger: str,
    trace_uri: str,
    trace_sha256: str,
) -> events_pb2.ProfileReady:
    """The `profile.ready` payload of a profile."""
    p, x = profile, profile.prefix
    summary = events_pb2.WorkloadSummary(
        rate_rps=p.rate.mean_rps,
        peak_rate_rps=p.rate.max_rps,
        prompt_tokens_p50=p.prompt_tokens.p50,
        prompt_tokens_p99=p.prompt_tokens.p99,
        completion_tokens_p50=p.completion_tokens.p50,
        completion_tokens_p99=p.completion_tokens.p99,
        prefix_reuse_share=x.share,
        cached_share=x.cached_share,
        ttft_p50_ms=p.latency.ttft_p50_ms,
        ttft_p99_ms=p.latency.ttft_p99_ms,
        itl_p99_ms=p.latency.itl_p99_ms,
        peak_p95_rate_rps=p.rate.peak_p95_rps,
        gap_cv=p.rate.gap_cv,
        concurrency_p50=p.concurrency.p50,
        concurrency_p99=p.concurrency.p99,
        conversations=x.conversations,
        turns_per_conversation=x.turns_per_conversation.mean,
        prefix_horizon_s=x.horizon_s,
        prefix_block_tokens=x.block_tokens,
    )
    message = events_pb2.ProfileReady(
        profile_id=profile_id,
        request_count=p.requests,
        summary=summary,
        bottlenecks=[
            events_pb2.Bottleneck(kind=s.kind, share=s.share, detail=f"{s.mean_ms:.1f} ms: {s.detail}")
            for s in p.bottleneck.shares
        ],
        trace_uri=trace_uri,
        trace_sha256=trace_sha256,
        trigger=trigger,
        version=version,
        bottleneck_verdict="empty" if p.empty_reason else p.bottleneck.verdict,
        bottleneck_source=p.bottleneck.source,
        bottleneck_evidence=list(p.bottleneck.evidence),
        empty_reason=p.empty_reason,
    )
    message.window_start.FromDatetime(p.window_start)
    message.window_end.FromDatetime(p.window_end)
    return message


async def next_version(store: Store, endpoint: str) -> int:
    """The version the endpoint's next profile gets (1 for its first). Counted per name, across
    every endpoint id the name has had (a re-created name goes on from the old one's versions)."""
    result = await store.query(
        f"SELECT max(version) FROM {TABLE} WHERE endpoint = {{endpoint:String}}", {"endpoint": endpoint}
    )
    return int(result.scalar() or 0) + 1


async def save(store: Store, stored: StoredProfile) -> None:
    """Write a profile; a retry with the same profile id is written once."""
    row: list[Any] = [
        stored.endpoint,
        stored.endpoint_uid,
        stored.version,
        stored.profile_id,
        stored.created,
        stored.profile.window_start,
        stored.profile.window_end,
        stored.trigger,
        stored.cause_id,
        stored.profile.requests,
        MessageToJson(stored.ready, indent=None),
        json.dumps(to_jsonable(stored.profile), separators=(",", ":")),
        stored.trace_jsonl,
        stored.trace_sha256,
    ]
    await store.insert(TABLE, [row], COLUMNS, dedup_token=f"profile-{stored.profile_id}")


_SELECT = f"SELECT {', '.join(COLUMNS)} FROM {TABLE} FINAL"


def _stored(row: tuple[Any, ...]) -> StoredProfile:
    values = dict(zip(COLUMNS, row, strict=True))
    return StoredProfile(
        endpoint=str(values["endpoint"]),
        endpoint_uid=str(values["endpoint_uid"]),
        version=int(values["version"]),
        profile_id=str(values["profile_id"]),
        created=values["created"],
        trigger=str(values["trigger"]),
        cause_id=str(values["cause_id"]),
        ready=Parse(values["ready_json"], events_pb2.ProfileReady()),
        profile=profile_from_jsonable(json.loads(values["profile_json"])),
        trace_jsonl=str(values["trace_jsonl"]),
        trace_sha256=str(values["trace_sha256"]),
    )


def _uid_filter(endpoint_uid: str | None) -> tuple[str, dict[str, Any]]:
    """The SQL condition (with its parameters) for "of the endpoint id", or none for None."""
    if endpoint_uid is None:
        return "", {}
    return " AND endpoint_uid = {uid:String}", {"uid": endpoint_uid}


async def latest(store: Store, endpoint: str, *, endpoint_uid: str | None = None) -> StoredProfile | None:
    """The endpoint's newest profile (highest version), or None; with `endpoint_uid`, the newest of
    that endpoint id only (None when that id has none, whatever other ids of the name have)."""
    where, params = _uid_filter(endpoint_uid)
    result = await store.query(
        f"{_SELECT} WHERE endpoint = {{endpoint:String}}{where} ORDER BY version DESC LIMIT 1",
        {"endpoint": endpoint, **params},
    )
    return _stored(result[0]) if result else None


async def by_id(store: Store, profile_id: str) -> StoredProfile | None:
    """The profile with this id, or None."""
    result = await store.query(f"{_SELECT} WHERE profile_id = {{id:String}} LIMIT 1", {"id": profile_id})
    return _stored(result[0]) if result else None


async def by_cause(
    store: Store, endpoint: str, cause_id: str, *, endpoint_uid: str | None = None
) -> StoredProfile | None:
    """The endpoint's profile built because of the event `cause_id` (of `endpoint_uid` when given),
    or None."""
    where, params = _uid_filter(endpoint_uid)
    result = await store.query(
        f"{_SELECT} WHERE endpoint = {{endpoint:String}} AND cause_id = {{cause:String}}{where} "
        "ORDER BY version DESC LIMIT 1",
        {"endpoint": endpoint, "cause": cause_id, **params},
    )
    return _stored(result[0]) if result else None


async def known_endpoint(store: Store, endpoint: str, *, endpoint_uid: str | None = None) -> bool:
    """Whether any profile of the endpoint (of `endpoint_uid` when given) is stored."""
    where, params = _uid_filter(endpoint_uid)
    result = await store.query(
        f"SELECT count() FROM {TABLE} WHERE endpoint = {{endpoint:String}}{where}",
        {"endpoint": endpoint, **params},
    )
    return int(result.scalar() or 0) > 0
