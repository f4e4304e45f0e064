"""The profiler's stored profiles, as a search reads them (the `profiles` table), and the trace a
search's runners replay (written where they read it).

A profile belongs to the endpoint's immutable id (`profiles.endpoint_uid`): a name deleted and
created again searches none of the earlier endpoint's profiles.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format

from evertune.errors import FailedPrecondition, InvalidArgument, NotFound
from evertune.infra.store import Store
from evertune.v1 import events_pb2


@dataclass(frozen=True)
class Profile:
    """A stored profile, as a search uses it."""

    profile_id: str  #: profile id
    peak_rps: float  #: peak request rate (highest 1-minute mean)
    trace_jsonl: str  #: the replayable trace
    requests: int  #: requests in the profiled window


async def latest_profile_id(store: Store, endpoint: str, uid: str) -> str:
    """Id of the newest profile stored for `endpoint` of id `uid`; "" when none."""
    rows = await store.query(
        "SELECT profile_id FROM profiles FINAL WHERE endpoint = {e:String} AND endpoint_uid = {u:String} "
        "ORDER BY version DESC LIMIT 1",
        {"e": endpoint, "u": uid},
    )
    return str(rows[0][0]) if rows else ""


async def read_profile(store: Store, endpoint: str, *, uid: str, profile_id: str | None) -> Profile:
    """The profile named (else the newest) of the endpoint of id `uid`: a profile of an earlier
    endpoint of the name is not found, as an unknown one. FAILED_PRECONDITION when there is none
    yet, or it has no traffic to replay."""
    where = "endpoint = {e:String} AND endpoint_uid = {u:String}"
    params = {"e": endpoint, "u": uid}
    if profile_id is not None:
        if not profile_id:
            raise InvalidArgument("profile_id: empty (leave it unset for the endpoint's latest)")
        where += " AND profile_id = {p:String}"
        params["p"] = profile_id
    rows = await store.query(
        "SELECT profile_id, ready_json, trace_jsonl, request_count FROM profiles FINAL "
        f"WHERE {where} ORDER BY version DESC LIMIT 1",
        params,
    )
    if not rows:
        if profile_id is not None:
            raise NotFound(f"profile_id: {profile_id!r} not found for endpoint {endpoint!r}")
        raise FailedPrecondition(f"endpoint {endpoint!r} has no profile yet: record traffic first")
    pid, ready_json, trace, count = rows[0]
    ready = json_format.Parse(ready_json, events_pb2.ProfileReady())
    peak = ready.summary.peak_rate_rps or ready.summary.rate_rps
    if ready.empty_reason or not trace or not peak > 0:
        raise FailedPrecondition(
            f"profile {pid} has no traffic to replay ({ready.empty_reason or 'no peak rate'})"
        )
    return Profile(profile_id=str(pid), peak_rps=float(peak), trace_jsonl=str(trace), requests=int(count))


def write_trace(profile: Profile, folder: Path) -> tuple[Path, str]:
    """The profile's trace written to `folder` (where runners read it), unless the same bytes lie
    there already; its path and SHA-256."""
    data = profile.trace_jsonl.encode()
    sha = hashlib.sha256(data).hexdigest()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{profile.profile_id}.jsonl"
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != sha:
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path, sha
