"""Searches in the store: the `searches` table (infra/clickhouse/0004_searches.sql).

A `SearchRecord` is the served `evertune.v1.Search` plus what the wire message has no field for
(the request id, the cause, the evidence). The objective, the outcome and the summary are columns
of their own and fields of the message too (`Search.objective`, `.outcome`, `.summary`); a row
written before the message had them still serves them (`_record` fills them from the columns).
`SearchRecords.save` writes a new revision of the row (deduplicated by
`search:<id>:<revision>`); reads take the highest revision (FINAL), so GetSearch and ListSearches
answer the same after a restart.

A search belongs to the endpoint it was started on by that endpoint's immutable id
(`Search.endpoint_uid`, the `endpoint_uid` column), not by its name: `Incarnation` is the one rule
a tenant's reads go through (`holds` for one search, `where` for ListSearches).

`SearchTrials` reads the runners' `trials` table (infra/clickhouse/0003_trials.sql) for ListTrials:
one `evertune.v1.Trial` per stored job, built from the row's own `completed_pb` (the
trial.completed the runner published) plus the columns the event has no field for.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import DecodeError
from google.protobuf.timestamp_pb2 import Timestamp

from evertune.infra.store import Store
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2
from evertune.v1 import search_service_pb2 as pb

TABLE = "searches"

COLUMNS: tuple[str, ...] = (
    "search_id",
    "revision",
    "endpoint",
    "endpoint_uid",
    "request_id",
    "trigger",
    "cause_id",
    "profile_id",
    "hardware_classes",
    "trial_budget",
    "objective",
    "state",
    "outcome",
    "create_time",
    "update_time",
    "end_time",
    "trials_started",
    "trials_completed",
    "modeled_candidates",
    "feasible_predicted",
    "ranking_s",
    "best_trial_id",
    "verified",
    "summary",
    "error",
    "evidence_json",
    "search_pb",
)

#: SearchOutcome on the wire of each outcome.
WIRE_OUTCOME: dict[str, events_pb2.SearchOutcome] = {
    "winner": events_pb2.SEARCH_OUTCOME_WINNER,
    "no_improvement": events_pb2.SEARCH_OUTCOME_NO_IMPROVEMENT,
    "infeasible": events_pb2.SEARCH_OUTCOME_INFEASIBLE,
    "failed": events_pb2.SEARCH_OUTCOME_FAILED,
    "cancelled": events_pb2.SEARCH_OUTCOME_CANCELLED,
}
#: SearchObjective on the wire of each objective name (UNSPECIFIED reads as goodput).
WIRE_OBJECTIVE: dict[str, endpoint_pb2.SearchObjective] = {
    "goodput": endpoint_pb2.SEARCH_OBJECTIVE_GOODPUT,
    "p50_ttft": endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT,
    "cost": endpoint_pb2.SEARCH_OBJECTIVE_COST,
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def objective_name(wire: endpoint_pb2.SearchObjective) -> str:
    """The objective name of a wire value ("" for UNSPECIFIED or an unknown value)."""
    return next((name for name, value in WIRE_OBJECTIVE.items() if value == wire), "")


@dataclass
class SearchRecord:
    """One search as stored."""

    search: pb.Search  #: the message GetSearch serves
    request_id: str  #: idempotency key of the start
    cause_id: str = ""  #: event that caused it ("" = none)
    objective: str = "goodput"  #: "goodput", "p50_ttft" or "cost"
    outcome: str = ""  #: see WIRE_OUTCOME ("" until done)
    summary: str = ""  #: plain-language summary (done only)
    evidence: dict[str, Any] = field(default_factory=dict)  #: figures behind the outcome
    feasible_predicted: int = 0  #: candidates the model predicted to meet the SLO
    ranking_s: float = 0.0  #: seconds ranking the space took
    revision: int = 0  #: revision last written (0 = never)

    @property
    def search_id(self) -> str:
        return self.search.id

    @property
    def done(self) -> bool:
        return self.search.state == pb.SEARCH_STATE_DONE

    def touch(self) -> None:
        """Set the update time to now."""
        self.search.update_time.FromDatetime(datetime.now(UTC))


def _time(ts: Any) -> datetime:
    return ts.ToDatetime(tzinfo=UTC) if ts.seconds or ts.nanos else _EPOCH


@dataclass(frozen=True)
class Incarnation:
    """One endpoint as it exists now: the searches that belong to it are those started on its
    immutable id. A name deleted and created again is a new incarnation, and the earlier one's
    searches belong to neither its new owner nor anyone but an operator.

    An endpoint stored before endpoints had ids (`uid` "") holds the searches without an id
    started since it was created (the rule the deployer's WatchEvents applies to such events); an
    endpoint with an id never holds a search without one."""

    name: str  #: endpoint name
    uid: str  #: Endpoint.uid ("" for an endpoint stored before ids)
    created: datetime  #: its create time (the epoch when unknown)

    @classmethod
    def of(cls, name: str, endpoint: endpoint_pb2.Endpoint) -> Incarnation:
        """The incarnation `endpoint`, stored under `name`, is."""
        return cls(name=name, uid=endpoint.uid, created=_time(endpoint.create_time))

    def holds(self, search: pb.Search) -> bool:
        """Whether `search` belongs to this incarnation."""
        if search.endpoint != self.name:
            return False
        if self.uid:
            return search.endpoint_uid == self.uid
        return not search.endpoint_uid and _time(search.create_time) >= self.created

    def where(self) -> tuple[str, dict[str, Any]]:
        """`holds` as a condition on `searches` rows, and its parameters."""
        params: dict[str, Any] = {"scope_e": self.name, "scope_u": self.uid}
        clause = "endpoint = {scope_e:String} AND endpoint_uid = {scope_u:String}"
        if not self.uid:
            clause += " AND create_time >= fromUnixTimestamp64Micro({scope_c:Int64}, 'UTC')"
            params["scope_c"] = int((self.created - _EPOCH).total_seconds() * 1_000_000)
        return clause, params


def _row(record: SearchRecord) -> list[Any]:
    s = record.search
    return [
        s.id,
        record.revision,
        s.endpoint,
        s.endpoint_uid,
        record.request_id,
        s.trigger,
        record.cause_id,
        s.profile_id,
        list(s.hardware_classes),
        s.trial_budget,
        record.objective,
        pb.SearchState.Name(s.state),
        record.outcome,
        _time(s.create_time),
        _time(s.update_time),
        _time(s.end_time),
        s.trials_started,
        s.trials_completed,
        s.modeled_candidates,
        record.feasible_predicted,
        record.ranking_s,
        s.best_trial_id,
        s.verified,
        record.summary,
        s.error,
        json.dumps(record.evidence, separators=(",", ":"), default=str),
        base64.b64encode(s.SerializeToString()).decode("ascii"),
    ]


_SELECT = (
    "SELECT search_pb, revision, request_id, cause_id, objective, outcome, summary, evidence_json, "
    f"feasible_predicted, ranking_s FROM {TABLE} FINAL"
)


def _record(row: tuple[Any, ...]) -> SearchRecord:
    search_pb, revision, request_id, cause_id, objective, outcome, summary, evidence, feasible, ranking = row
    search = pb.Search.FromString(base64.b64decode(search_pb))
    if summary and not search.summary:
        search.summary = str(summary)
    if not search.objective:
        search.objective = WIRE_OBJECTIVE.get(str(objective), endpoint_pb2.SEARCH_OBJECTIVE_GOODPUT)
    return SearchRecord(
        search=search,
        request_id=str(request_id),
        cause_id=str(cause_id),
        objective=str(objective),
        outcome=str(outcome),
        summary=str(summary),
        evidence=json.loads(evidence) if evidence else {},
        feasible_predicted=int(feasible),
        ranking_s=float(ranking),
        revision=int(revision),
    )


class SearchRecords:
    """Reads and writes searches in one store's database."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def save(self, record: SearchRecord) -> None:
        """Write the record as its next revision (a retried write is stored once)."""
        record.revision += 1
        await self.store.insert(
            TABLE, [_row(record)], COLUMNS, dedup_token=f"search:{record.search_id}:{record.revision}"
        )

    async def get(self, search_id: str) -> SearchRecord | None:
        rows = await self.store.query(f"{_SELECT} WHERE search_id = {{id:String}}", {"id": search_id})
        return _record(rows[0]) if rows else None

    async def by_request(self, request_id: str) -> SearchRecord | None:
        """The search a StartSearch request id (or a profile event) created, if any."""
        rows = await self.store.query(
            f"{_SELECT} WHERE request_id = {{r:String}} ORDER BY create_time LIMIT 1", {"r": request_id}
        )
        return _record(rows[0]) if rows else None

    async def unfinished(
        self, endpoint: str | None = None, *, incarnation: Incarnation | None = None
    ) -> list[SearchRecord]:
        """Searches not DONE: of one endpoint by name, only those `incarnation` holds, or all."""
        where = "state != 'SEARCH_STATE_DONE'"
        params: dict[str, Any] = {}
        if incarnation is not None:
            clause, params = incarnation.where()
            where += f" AND {clause}"
        elif endpoint is not None:
            where += " AND endpoint = {e:String}"
            params["e"] = endpoint
        rows = await self.store.query(f"{_SELECT} WHERE {where} ORDER BY create_time", params)
        return [_record(r) for r in rows]

    async def page(
        self,
        *,
        endpoint: str,
        states: list[str],
        limit: int,
        offset: int,
        incarnation: Incarnation | None = None,
    ) -> tuple[list[SearchRecord], bool]:
        """A page of searches, newest first, and whether more follow: of `endpoint` by name ("" =
        every endpoint), or only those `incarnation` holds."""
        clauses = ["1"]
        params: dict[str, Any] = {"limit": limit + 1, "offset": offset}
        if incarnation is not None:
            clause, scope = incarnation.where()
            clauses.append(clause)
            params.update(scope)
        elif endpoint:
            clauses.append("endpoint = {e:String}")
            params["e"] = endpoint
        if states:
            clauses.append("state IN {states:Array(String)}")
            params["states"] = states
        rows = await self.store.query(
            f"{_SELECT} WHERE {' AND '.join(clauses)} ORDER BY create_time DESC, search_id DESC "
            "LIMIT {limit:UInt32} OFFSET {offset:UInt32}",
            params,
        )
        records = [_record(r) for r in rows]
        return records[:limit], len(records) > limit


# --- the runners' `trials` table (infra/clickhouse/0003_trials.sql), read as the runner writes it ---

TRIALS_TABLE = "trials"

_TRIAL_SELECT = (
    "SELECT completed_pb, started_at, finished_at, deliveries, log_tail, config_key, "
    f"trial_id, job_id, search_id, hardware_class, status, error FROM {TRIALS_TABLE} FINAL"
)
#: TrialStatus of the table's `status` column (for a row whose stored report cannot be read).
_STATUS: dict[str, jobs_pb2.TrialStatus] = {
    "ok": jobs_pb2.TRIAL_STATUS_OK,
    "error": jobs_pb2.TRIAL_STATUS_ERROR,
    "timeout": jobs_pb2.TRIAL_STATUS_TIMEOUT,
    "cancelled": jobs_pb2.TRIAL_STATUS_CANCELLED,
}


def _timestamp(value: Any) -> Timestamp:
    ts = Timestamp()
    if isinstance(value, datetime):
        ts.FromDatetime(value if value.tzinfo else value.replace(tzinfo=UTC))
    return ts


def trial_of_row(row: tuple[Any, ...]) -> pb.Trial:
    """The served `Trial` of one `trials` row (the one conversion). The report is the runner's own
    `completed_pb`; a row whose payload cannot be decoded is served from its columns, saying so."""
    payload, started, finished, deliveries, log_tail, config_key, *ids = row
    trial_id, job_id, search_id, hardware_class, status, error = ids
    try:
        result = events_pb2.TrialCompleted.FromString(base64.b64decode(payload))
    except (DecodeError, ValueError, binascii.Error):
        result = events_pb2.TrialCompleted(
            search_id=str(search_id),
            trial_id=str(trial_id),
            job_id=str(job_id),
            hardware_class=str(hardware_class),
            status=_STATUS.get(str(status), jobs_pb2.TRIAL_STATUS_UNSPECIFIED),
            error=str(error) or "the stored report cannot be decoded",
        )
    return pb.Trial(
        result=result,
        start_time=_timestamp(started),
        end_time=_timestamp(finished),
        deliveries=int(deliveries),
        log_tail=str(log_tail),
        config_key=str(config_key),
    )


class SearchTrials:
    """Reads a search's trials from the runners' `trials` table (the searcher never writes it)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def page(self, search_id: str, *, limit: int, offset: int) -> tuple[list[pb.Trial], bool]:
        """A page of the search's trials in the order they ended, and whether more follow. Rows are
        read FINAL (a redelivered job stored twice is served once); the order is stable while trials
        are added, as later trials end later."""
        rows = await self.store.query(
            f"{_TRIAL_SELECT} WHERE search_id = {{s:String}} "
            "ORDER BY finished_at, trial_id, job_id LIMIT {limit:UInt32} OFFSET {offset:UInt32}",
            {"s": search_id, "limit": limit + 1, "offset": offset},
        )
        trials = [trial_of_row(tuple(r)) for r in rows]
        return trials[:limit], len(trials) > limit
