"""The searcher's shell: accept searches, run each as a task, keep its record, publish its events.

`Searches` is what the gRPC API and the profile.ready consumer call:

- `start(request, trigger=, cause_id=)`: validates the request, reads the endpoint (`endpoints`
  KV), its live configuration (the stable deployment's, from `deployments`, else the endpoint's
  initial one) and the profile (`profiles` table: the one named, else the endpoint's latest),
  stores the search PENDING and runs it in a task. Idempotent on `request_id`.
  A search belongs to the endpoint's immutable id (`Endpoint.uid`), not its name: the id is stored
  on the search (`Search.endpoint_uid`, the `searches.endpoint_uid` column), carried by its events
  and its jobs (so the runners' trial events carry it too), and the profile must be one of that id
  (`profiles.endpoint_uid`): a name deleted and created again searches none of the earlier
  endpoint's profiles, and its running search does not hold the new one's back.
- the task (`_run`): writes the profile's trace where runners read it (`trace_dir`), prepares it
  for the performance model, builds the candidate space of each hardware class, and calls
  `orchestrate.run_search` with the model in a worker thread and `TrialBus` as trial executor.
  `search.started` goes out once the space is ranked; the record is saved after every batch of
  trials; `search.completed` (winner, evidence, summary in the record) ends it.
- `start_or_queue` (the profile.ready consumer): `start`, or, while the endpoint has a search
  running in this instance, keep the request and start it when that search ends; a newer request
  replaces a queued one (only the newest profile is worth searching). The queue lives in memory: a
  searcher that restarts forgets it, and the next profile.ready starts a search again.
- `get`, `page`, `trials` (a page of the runners' `trials` rows), `cancel` (cancels the task; jobs
  not yet taken are withdrawn, and the runners stop a trial already running on the search's
  `search.completed`), `watch` (the search's events from EVENTS, ending after its
  `search.completed`).

Event ids of search.started / search.completed derive from the search id (a republish is stored
once). One searcher instance per deployment: at start it ends searches a previous instance left
running as failed ("the searcher restarted").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import math
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evertune.searcher.jobs import JobTemplate
from evertune.searcher.metrics import SearcherStats
from evertune.searcher.model import SearchModel, ThreadedModel
from evertune.searcher.noise import Comparison
from evertune.searcher.orchestrate import (
    Outcome,
    SearchPlan,
    SearchProgress,
    SearchResult,
    TrialOrder,
    TrialResult,
    run_search,
)
from evertune.searcher.records import (
    WIRE_OBJECTIVE,
    WIRE_OUTCOME,
    Incarnation,
    SearchRecord,
    SearchRecords,
    SearchTrials,
    objective_name,
)
from evertune.searcher.settings import SearcherSettings
from evertune.searcher.space import (
    Candidate,
    SpaceLimits,
    candidate_space,
    defaults_key,
    defaults_seat_key,
    unpriced_class,
    unpriced_keys,
    unpriced_representatives,
)
from evertune.searcher.strategy import NO_CONFIRMATION, NoiseRule, Objective
from evertune.searcher.summary import Context, explain, knob_changes
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.domain.engines import EngineSpec, HardwareProfile, InvalidEngineConfig, get_profile
from evertune.domain.model import ensure_model
from evertune.domain.perfmodel import Efficiency, PromptTokens, load_arch, load_efficiency, prepare
from evertune.domain.perfmodel.simulate import block_size_of
from evertune.domain.slo import Slo
from evertune.domain.workloads.source import load_workload
from evertune.errors import EvertuneError, FailedPrecondition, InvalidArgument, NotFound
from evertune.infra.bus import Bucket, publish_event
from evertune.infra.events import EventKind, endpoint_token, event_filter_subject, new_event
from evertune.infra.logging import get_logger
from evertune.infra.runtime.tasks import cancel_and_wait
from evertune.infra.store import Store
from evertune.v1 import endpoint_pb2, events_pb2
from evertune.v1 import search_service_pb2 as pb

log = get_logger("evertune.searcher")

SOURCE = "searcher"
#: Seconds a cancelled search has to record its end before it is cancelled again.
CANCEL_GRACE_S = 10.0


@dataclass(frozen=True)
class Profile:
    """A stored profile, as a search uses it."""

    profile_id: str  #: profile id
    peak_rps: float  #: peak request rate (highest 1-minute mean)
    trace_jsonl: str  #: the replayable trace
    requests: int  #: requests in the profiled window


@dataclass(frozen=True)
class Prepared:
    """Everything a search's task needs, read and checked when it was accepted."""

    endpoint: endpoint_pb2.Endpoint  #: the endpoint as stored
    live: endpoint_pb2.EngineConfig  #: the live configuration (the baseline)
    profile: Profile  #: the profile searched against
    classes: tuple[str, ...]  #: hardware classes


#: Runs a batch of trial orders for a search (TrialBus.execute with the search's template bound).
Executor = Callable[..., Any]


def _event_id(kind: str, search_id: str) -> str:
    return hashlib.sha256(f"{kind}:{search_id}".encode()).hexdigest()[:32]


def _now() -> datetime:
    return datetime.now(UTC)


class Searches:
    """See the module doc."""

    def __init__(
        self,
        settings: SearcherSettings,
        *,
        js: JetStreamContext,
        store: Store,
        data_dir: Path,
        execute: Executor,
        limits: SpaceLimits | None = None,
        efficiency: dict[str, Efficiency] | None = None,
    ) -> None:
        self.settings = settings
        self.js = js
        self.store = store
        self.records = SearchRecords(store)
        self.trial_rows = SearchTrials(store)
        self.data_dir = data_dir
        self.execute = execute
        self.limits = limits or SpaceLimits()
        self.efficiency = efficiency or {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._endpoint_of: dict[str, str] = {}  # running search id -> endpoint
        self._uid_of: dict[str, str] = {}  # running search id -> the endpoint's immutable id
        #: per endpoint, the newest search request waiting for the running one to end
        self._queued: dict[str, tuple[pb.StartSearchRequest, str, str]] = {}
        #: per endpoint, the last search that ended with a winner (its rollout holds the queue)
        self._winner_of: dict[str, str] = {}
        #: endpoints whose last search's winner is rolling out: new requests queue until it ends
        self._rolling_out: set[str] = set()
        self._drains: set[asyncio.Task[None]] = set()
        self._closing = False
        self._cancel_reason: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._endpoints: Bucket | None = None
        self._deployments: Bucket | None = None
        self.completed = 0  #: searches finished by this instance
        self.stats = SearcherStats()  #: what the metrics export

    async def open(self) -> None:
        """Open the buckets and end searches a previous instance left running."""
        self._endpoints = await Bucket.open(self.js, "endpoints")
        self._deployments = await Bucket.open(self.js, "deployments")
        for record in await self.records.unfinished():
            await self._finish(
                record, outcome="failed", error="the searcher restarted while the search ran; start it again"
            )

    async def close(self) -> None:
        """Cancel running searches: each ends cancelled ("the searcher stopped"), its queued jobs
        withdrawn. (A searcher that dies instead leaves them to the next start, which fails them.)
        Queued requests are dropped."""
        self._closing = True
        self._queued.clear()
        for search_id, task in list(self._tasks.items()):
            self._cancel_reason[search_id] = "the searcher stopped"
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks.values()), timeout=10.0)

    async def endpoint(self, name: str) -> endpoint_pb2.Endpoint | None:
        """The endpoint as stored in the `endpoints` bucket, or None."""
        assert self._endpoints is not None, "Searches.open() first"
        entry = await self._endpoints.get(name)
        return endpoint_pb2.Endpoint.FromString(entry.value) if entry is not None else None

    async def latest_profile_id(self, endpoint: str, uid: str | None = None) -> str:
        """Id of the newest profile stored for the endpoint of id `uid` (None: the id the name
        holds now); "" when none, or when no endpoint holds the name."""
        if uid is None:
            found = await self.endpoint(endpoint)
            if found is None:
                return ""
            uid = found.uid
        rows = await self.store.query(
            "SELECT profile_id FROM profiles FINAL WHERE endpoint = {e:String} AND endpoint_uid = {u:String} "
            "ORDER BY version DESC LIMIT 1",
            {"e": endpoint, "u": uid},
        )
        return str(rows[0][0]) if rows else ""

    @property
    def running(self) -> int:
        return len(self._tasks)

    @property
    def queued_count(self) -> int:
        """Search requests waiting for their endpoint's running search or rollout."""
        return len(self._queued)

    # --- start -----------------------------------------------------------------------------------
    async def start(
        self,
        request: pb.StartSearchRequest,
        *,
        trigger: str = "api",
        cause_id: str = "",
        caller_sees: Incarnation | None = None,
    ) -> SearchRecord:
        """Accept a search (see the module doc); errors are one line naming the field.
        `caller_sees` is the endpoint a tenant's caller was allowed to reach (None: an operator, or
        the searcher itself): a search for any other endpoint of the name is NOT_FOUND, and a
        request id that started a search it does not hold is refused."""
        if not request.request_id:
            raise InvalidArgument("request_id: required (a client-chosen id that makes the call idempotent)")
        if not request.endpoint:
            raise InvalidArgument("endpoint: required")
        try:
            endpoint_token(request.endpoint)
        except InvalidArgument as err:
            raise InvalidArgument(f"endpoint: {err}") from None
        if request.trial_budget == 1 or request.trial_budget > self.settings.max_budget:
            raise InvalidArgument(
                f"trial_budget: must be 0 (the default, {self.settings.default_budget}) or "
                f"2..{self.settings.max_budget}, got {request.trial_budget}"
            )
        for i, name in enumerate(request.hardware_classes):
            self._hardware(name, field=f"hardware_classes[{i}]")
        if request.objective and not objective_name(request.objective):
            raise InvalidArgument(
                f"objective: unknown value {request.objective} (goodput, p50_ttft or cost; unset = the "
                "endpoint's)"
            )
        async with self._lock:
            existing = await self.records.by_request(request.request_id)
            if existing is not None:
                if existing.search.endpoint != request.endpoint or (
                    caller_sees is not None and not caller_sees.holds(existing.search)
                ):
                    raise InvalidArgument(
                        f"request_id: {request.request_id!r} already started another search "
                        "(choose a new request id)"
                    )
                return existing
            prepared = await self._prepare(request, caller_sees)
            busy = await self.records.unfinished(
                incarnation=Incarnation.of(request.endpoint, prepared.endpoint)
            )
            if busy:
                raise FailedPrecondition(
                    f"endpoint {request.endpoint!r} already has a search running ({busy[0].search_id}); "
                    "cancel it or wait for it to finish"
                )
            record = self._new_record(request, prepared, trigger=trigger, cause_id=cause_id)
            await self.records.save(record)
            task = asyncio.create_task(self._run(record, prepared), name=f"search:{record.search_id}")
            self._tasks[record.search_id] = task
            self._endpoint_of[record.search_id] = request.endpoint
            self._uid_of[record.search_id] = record.search.endpoint_uid
            task.add_done_callback(self._forget)
        log.info("search accepted", search=record.search_id, endpoint=request.endpoint, trigger=trigger)
        return record

    def queued(self, endpoint: str) -> pb.StartSearchRequest | None:
        """The request waiting for the endpoint's running search, if any."""
        entry = self._queued.get(endpoint)
        return entry[0] if entry is not None else None

    async def start_or_queue(
        self, request: pb.StartSearchRequest, *, trigger: str, cause_id: str = ""
    ) -> SearchRecord | None:
        """`start`, or None after queueing the request behind the endpoint's running search (see the
        module doc)."""
        running = request.endpoint in self._endpoint_of.values()
        if running or request.endpoint in self._rolling_out:
            replaced = self._queued.get(request.endpoint)
            self._queued[request.endpoint] = (request, trigger, cause_id)
            log.info(
                "search queued behind the running one" if running else "search queued behind a rollout",
                endpoint=request.endpoint,
                request=request.request_id,
                replaced=replaced[0].request_id if replaced else "",
            )
            return None
        return await self.start(request, trigger=trigger, cause_id=cause_id)

    async def _start_queued(self, endpoint: str) -> None:
        """Start the endpoint's queued search, after the rollout of the winner it queued behind.
        Requests that arrive during that rollout queue too (`_rolling_out`): a drift seen while a
        canary and the stable configuration share the traffic describes neither, and its trials
        would run beside both engines. (In a demo run on an EPYC Zen 3 a drift's search started
        during the canary's step 1 and the canary's p99 TTFT went from 581 to 2,246 ms.)

        A winner that was promoted supersedes the queued search: its profile described traffic the
        replaced configuration served, and the new configuration, if it does not hold the SLO,
        brings its own breach (the sla-monitor's per-deployment rules) or drift, and a fresh
        profile. (In a demo run on 2 cores, the queued search's trials started beside the promoted
        configuration and raised its p50 TTFT from 125-142 ms to 250-440 ms.)"""
        winner = self._winner_of.pop(endpoint, "")
        final = None
        if winner and self.settings.rollout_wait_s > 0:
            self._rolling_out.add(endpoint)
            try:
                final = await self.wait_for_rollout(endpoint, winner)
            finally:
                self._rolling_out.discard(endpoint)
        entry = self._queued.pop(endpoint, None)
        if entry is None or self._closing:
            return
        if final == endpoint_pb2.DEPLOYMENT_STATE_ACTIVE:
            log.info(
                "queued search dropped: the winner it waited for was promoted",
                endpoint=endpoint,
                request=entry[0].request_id,
                winner_search=winner,
            )
            return
        request, trigger, cause_id = entry
        try:
            await self.start_or_queue(request, trigger=trigger, cause_id=cause_id)
        except EvertuneError as err:
            log.info("queued search not started", endpoint=endpoint, reason=str(err))
        except Exception:
            log.exception("queued search not started", endpoint=endpoint)

    async def endpoint_deleted(
        self, endpoint: str, *, endpoint_uid: str = "", name_reused: bool = False
    ) -> list[str]:
        """Drop the endpoint's queued search request and cancel its running search: a deleted
        endpoint has nothing to tune, and trials kept running share the machine with whatever runs
        next. (In `bench loop` a request queued behind a winner's rollout started 2 s before its
        endpoint was deleted, and its 4 trials ran beside the comparison's windows.) With
        `endpoint_uid`, only the searches of that endpoint id are cancelled; `name_reused`: the name
        holds a new endpoint already, whose queued request stays. The ids of the searches cancelled."""
        if not name_reused:
            self._queued.pop(endpoint, None)
            self._winner_of.pop(endpoint, None)
        cancelled = [
            sid
            for sid, name in list(self._endpoint_of.items())
            if name == endpoint and (not endpoint_uid or self._uid_of.get(sid) == endpoint_uid)
        ]
        for search_id in cancelled:
            await self.cancel(search_id, f"endpoint {endpoint} was deleted")
        if cancelled:
            log.info("searches of a deleted endpoint cancelled", endpoint=endpoint, searches=cancelled)
        return cancelled

    async def wait_for_rollout(self, endpoint: str, search_id: str) -> endpoint_pb2.DeploymentState | None:
        """Until the rollout of `search_id`'s winner on `endpoint` has ended: a deployment of that
        origin appeared (within `rollout_appear_s`) and left pending, starting and canary; at most
        `rollout_wait_s` in all. The state it left them for (ACTIVE: promoted), or None when no
        rollout appeared or it did not end in time. Watches the deployments bucket; never raises."""
        assert self._deployments is not None
        rolling = {
            endpoint_pb2.DEPLOYMENT_STATE_PENDING,
            endpoint_pb2.DEPLOYMENT_STATE_STARTING,
            endpoint_pb2.DEPLOYMENT_STATE_CANARY,
        }
        loop = asyncio.get_running_loop()
        appear_by = loop.time() + self.settings.rollout_appear_s
        seen = False
        try:
            async with (
                asyncio.timeout(self.settings.rollout_wait_s),
                self._deployments.watch(f"{endpoint}.*") as entries,
            ):
                pending = asyncio.ensure_future(anext(entries))
                try:
                    while True:
                        left = None if seen else max(0.0, appear_by - loop.time())
                        done, _ = await asyncio.wait({pending}, timeout=left)
                        if not done:
                            log.info("no rollout of the winner; queued search goes on", endpoint=endpoint)
                            return None
                        entry = pending.result()
                        pending = asyncio.ensure_future(anext(entries))
                        # deployments are `<endpoint>.dep-*`; the bucket keeps other keys beside them
                        # (the deployer's rollout mutex, JSON)
                        if entry is None or not entry.value or not entry.key.startswith(f"{endpoint}.dep-"):
                            continue
                        try:
                            deployment = endpoint_pb2.Deployment.FromString(entry.value)
                        except DecodeError:
                            continue
                        if deployment.origin_search_id != search_id:
                            continue
                        seen = True
                        if deployment.state not in rolling:
                            return deployment.state
                finally:
                    pending.cancel()
        except TimeoutError:
            log.info("winner's rollout still running; queued search goes on", endpoint=endpoint)
        except Exception:
            log.exception("could not follow the winner's rollout", endpoint=endpoint)
        return None

    def _forget(self, task: asyncio.Task[None]) -> None:
        for search_id, running in list(self._tasks.items()):
            if running is task:
                del self._tasks[search_id]
                endpoint = self._endpoint_of.pop(search_id, "")
                self._uid_of.pop(search_id, None)
                # a winner's rollout holds the requests that arrive meanwhile, queued or not yet
                if (endpoint in self._queued or endpoint in self._winner_of) and not self._closing:
                    drain = asyncio.create_task(self._start_queued(endpoint), name=f"queued:{endpoint}")
                    self._drains.add(drain)
                    drain.add_done_callback(self._drains.discard)

    def _hardware(self, name: str, *, field: str) -> HardwareProfile:
        try:
            return get_profile(name)
        except InvalidEngineConfig as err:
            raise InvalidArgument(f"{field}: {err}") from None

    async def _prepare(self, request: pb.StartSearchRequest, caller_sees: Incarnation | None) -> Prepared:
        assert self._endpoints is not None and self._deployments is not None, "Searches.open() first"
        entry = await self._endpoints.get(request.endpoint)
        endpoint = endpoint_pb2.Endpoint.FromString(entry.value) if entry is not None else None
        # (a name deleted and created again since the caller's check is another endpoint)
        if endpoint is None or (caller_sees is not None and endpoint.uid != caller_sees.uid):
            raise NotFound(f"endpoint {request.endpoint!r} not found")
        if endpoint.spec.search_policy == endpoint_pb2.SEARCH_POLICY_OFF:
            raise FailedPrecondition(f"endpoint {request.endpoint!r}: search_policy is OFF")
        if endpoint.spec.slo.ttft_p99_ms <= 0:
            raise FailedPrecondition(f"endpoint {request.endpoint!r} has no SLO (slo.ttft_p99_ms)")
        classes = tuple(request.hardware_classes) or (endpoint.spec.hardware_pool.hardware_class or "cpu",)
        for i, name in enumerate(classes):
            self._hardware(name, field=f"hardware_classes[{i}]")
        live = endpoint.spec.initial_engine_config
        if endpoint.stable_deployment_id:
            stable = await self._deployments.get(f"{request.endpoint}.{endpoint.stable_deployment_id}")
            if stable is not None:
                live = endpoint_pb2.Deployment.FromString(stable.value).engine_config
        profile = await self._profile(
            request.endpoint, endpoint.uid, request.profile_id if request.HasField("profile_id") else None
        )
        return Prepared(endpoint=endpoint, live=live, profile=profile, classes=classes)

    async def _profile(self, endpoint: str, uid: str, profile_id: str | None) -> Profile:
        """The profile named (else the newest) of the endpoint of id `uid`: a profile of an earlier
        endpoint of the name is not found, as an unknown one."""
        where = "endpoint = {e:String} AND endpoint_uid = {u:String}"
        params = {"e": endpoint, "u": uid}
        if profile_id is not None:
            if not profile_id:
                raise InvalidArgument("profile_id: empty (leave it unset for the endpoint's latest)")
            where += " AND profile_id = {p:String}"
            params["p"] = profile_id
        rows = await self.store.query(
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

    def _new_record(
        self, request: pb.StartSearchRequest, prepared: Prepared, *, trigger: str, cause_id: str
    ) -> SearchRecord:
        now = _now()
        search = pb.Search(
            id=f"search-{uuid.uuid4().hex[:12]}",
            endpoint=request.endpoint,
            endpoint_uid=prepared.endpoint.uid,
            profile_id=prepared.profile.profile_id,
            hardware_classes=list(prepared.classes),
            trial_budget=request.trial_budget or self.settings.default_budget,
            state=pb.SEARCH_STATE_PENDING,
            trigger=trigger,
        )
        search.create_time.FromDatetime(now)
        search.update_time.FromDatetime(now)
        objective = self.objective_of(request, prepared.endpoint)
        search.objective = WIRE_OBJECTIVE[objective]
        return SearchRecord(
            search=search, request_id=request.request_id, cause_id=cause_id, objective=objective
        )

    def objective_of(self, request: pb.StartSearchRequest, endpoint: endpoint_pb2.Endpoint) -> str:
        """The search's objective: the request's, else the endpoint's, else the searcher's default."""
        return (
            objective_name(request.objective)
            or objective_name(endpoint.spec.objective)
            or self.settings.objective
        )

    # --- the search's task -------------------------------------------------------------------------
    async def _run(self, record: SearchRecord, prepared: Prepared) -> None:
        started = _now()
        try:
            record.search.state = pb.SEARCH_STATE_RUNNING
            record.touch()
            await self.records.save(record)
            setup = await asyncio.to_thread(self._setup, record, prepared)
            result = await run_search(
                setup.plan,
                model=ThreadedModel(setup.model),
                execute=lambda orders: self.execute(
                    orders, template=setup.template, slo=prepared.endpoint.spec.slo, gate_rps=setup.gate_rps
                ),
                progress=lambda state: self._progress(record, state, setup),
            )
        except asyncio.CancelledError:
            reason = self._cancel_reason.pop(record.search_id, "cancelled")
            with contextlib.suppress(Exception):
                await asyncio.shield(self._finish(record, outcome="cancelled", error=reason, started=started))
            raise
        except EvertuneError as err:
            await self._finish(record, outcome="failed", error=str(err), started=started)
            return
        except Exception as err:
            log.exception("search failed", search=record.search_id)
            await self._finish(
                record,
                outcome="failed",
                error=f"searcher error: {type(err).__name__}: {err}",
                started=started,
            )
            return
        await self._conclude(record, prepared, setup, result, started=started)

    def _setup(self, record: SearchRecord, prepared: Prepared) -> _Setup:
        """Trace file, model, space, plan (blocking: run in a thread)."""
        s = self.settings
        spec = prepared.endpoint.spec
        model_dir = self._model_dir(spec.model or prepared.live.model)
        base = EngineSpec.from_proto(prepared.live, default_model=str(model_dir))
        trace_path, sha = self._trace_file(prepared.profile)
        plan = load_workload(
            str(trace_path), duration_s=None, seed=0, rate_scale=1.0, tokenizer_dir=model_dir
        ).plan
        hardware = {name: get_profile(name) for name in prepared.classes}
        first = prepared.classes[0]
        tokens = PromptTokens.of_folder(model_dir)
        inputs = prepare(plan, tokens, block_size=block_size_of(base, hardware[first]))
        candidates: list[tuple[Candidate, str]] = []
        pool_replicas = max(spec.hardware_pool.max_replicas, 1)
        for name in prepared.classes:
            sim = name.startswith("sim-")
            # The performance model prices neither n-gram drafts, a dtype nor the execution mode: a
            # simulated class would only try them for nothing. The block size it prices, but a sim
            # engine's searches keep the space they had (half the candidates to rank).
            limits = self.limits.model_copy(
                update={
                    "try_speculative_ngram": self.limits.try_speculative_ngram and not sim,
                    "cpu_dtypes": () if sim else self.limits.cpu_dtypes,
                    "cpu_enforce_eager": () if sim else self.limits.cpu_enforce_eager,
                    "cpu_block_sizes": () if sim else self.limits.cpu_block_sizes,
                }
            )
            space = candidate_space(
                base=base,
                hardware=hardware[name],
                limits=limits,
                max_replicas=min(pool_replicas, s.max_replicas),
            )
            for c in space:
                candidates.append(
                    (c if name == first else dataclasses.replace(c, key=f"{name}:{c.key}"), name)
                )
        # The trace hashed at every block size of the space (GPU classes beside a CPU one included).
        by_block_size = {
            size: prepare(plan, tokens, block_size=size)
            for size in sorted({block_size_of(c.spec, hardware[name]) for c, name in candidates})
        }
        if not candidates or candidates[0][0].spec != base:
            raise FailedPrecondition(
                f"the live configuration cannot run on {first}: the engines refuse it there"
            )
        space_of_first = [c for c, _ in candidates]
        defaults = defaults_key(space_of_first, base=candidates[0][0], hardware=hardware[first])
        # vLLM's defaults first (the figure a winner must never be worse than), then the dtypes and
        # the execution mode the model cannot price
        must_try = tuple(
            dict.fromkeys(
                [
                    *([defaults] if defaults else []),
                    *unpriced_representatives(space_of_first, base=candidates[0][0]),
                ]
            )
        )
        objective = Objective(record.objective)
        efficiency = {
            name: self.efficiency.get(name)
            or load_efficiency(self.data_dir, hardware[name].name)
            or Efficiency()
            for name in prepared.classes
        }
        model = SearchModel(
            inputs=inputs,
            arch=load_arch(model_dir),
            hardware=hardware,
            efficiency=efficiency,
            slo=Slo.from_proto(spec.slo),
            p50_target_ms=spec.slo.ttft_p50_ms,
            target_rps=prepared.profile.peak_rps,
            ladder=s.rate_ladder,
            headroom=s.headroom,
            horizon_s=s.model_horizon_s,
            goodput=objective is not Objective.P50_TTFT,
            live_class=unpriced_class(candidates[0][0].spec),
            inputs_by_block_size=by_block_size,
        )
        search_plan = SearchPlan(
            search_id=record.search_id,
            baseline=candidates[0][0],
            baseline_class=first,
            candidates=candidates,
            budget=record.search.trial_budget,
            objective=objective,
            eta=s.eta,
            min_gain=s.min_gain,
            noise=noise_rule(s, objective=objective, simulated=first.startswith("sim-")),
            must_try=must_try,
            unpriced=tuple(unpriced_keys(space_of_first, base=candidates[0][0])),
            defaults_seat=defaults_seat_key(space_of_first, base=candidates[0][0], hardware=hardware[first]),
        )
        template = JobTemplate(
            search_id=record.search_id,
            endpoint=record.search.endpoint,
            endpoint_uid=record.search.endpoint_uid,
            profile_id=prepared.profile.profile_id,
            trace_uri=trace_path.resolve().as_uri(),
            trace_sha256=sha,
            slo=spec.slo,
            target_rps=prepared.profile.peak_rps,
            ladder=s.rate_ladder,
            duration_s=s.trial_duration_s,
            warmup_s=s.trial_warmup_s,
            repeats=s.trial_repeats,
            seed=int(hashlib.sha256(record.search_id.encode()).hexdigest()[:8], 16),
            gates=tuple(s.gates),
            agreement_threshold=spec.correctness_agreement_threshold,
            timeout_s=s.trial_timeout_s,
            engine_model=prepared.live.model,
            headroom=s.headroom,
        )
        context = Context(
            base=base,
            slo=model.slo,
            p50_target_ms=model.p50_target_ms,
            target_rps=model.target_rps,
            headroom=s.headroom,
            objective=objective,
            min_gain=s.min_gain,
            budget=record.search.trial_budget,
            defaults_key=defaults,
        )
        return _Setup(
            plan=search_plan, model=model, template=template, context=context, gate_rps=model.gate_rps
        )

    def _model_dir(self, model: str) -> Path:
        """Where the performance model reads the served model's config and tokenizer."""
        if model and (Path(model) / "config.json").is_file():
            return Path(model)
        if self.settings.model_dir is not None:
            return self.settings.model_dir
        return ensure_model(self.data_dir)

    def _trace_file(self, profile: Profile) -> tuple[Path, str]:
        """The profile's trace written where runners read it; its path and SHA-256."""
        data = profile.trace_jsonl.encode()
        sha = hashlib.sha256(data).hexdigest()
        folder = self.settings.trace_dir or self.data_dir / "searcher" / "traces"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{profile.profile_id}.jsonl"
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != sha:
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        return path, sha

    async def _progress(self, record: SearchRecord, state: SearchProgress, setup: _Setup) -> None:
        search = record.search
        first_report = search.modeled_candidates == 0 and state.phase == "trials"
        search.modeled_candidates = state.modeled
        search.trials_started = state.trials_started
        search.trials_completed = len(state.trials)
        record.feasible_predicted = state.feasible_predicted
        record.ranking_s = state.ranking_s
        if state.baseline is not None and state.baseline.metrics is not None:
            search.baseline_metrics.CopyFrom(state.baseline.metrics)
        best = state.best
        if best is not None and best.metrics is not None:
            search.best_trial_id = best.trial_id
            search.best_metrics.CopyFrom(best.metrics)
            spec = next(c.spec for c, _ in setup.plan.candidates if c.key == best.candidate_key)
            search.best_engine_config.CopyFrom(_engine_config(spec, setup.template))
            search.verified = not best.simulated
        record.touch()
        await self.records.save(record)
        if first_report:
            started = events_pb2.SearchStarted(
                search_id=search.id,
                profile_id=search.profile_id,
                hardware_classes=list(search.hardware_classes),
                trial_budget=search.trial_budget,
                candidates=state.feasible_predicted,
                trigger=search.trigger,
            )
            await self._publish(EventKind.SEARCH_STARTED, record, started)
            log.info(
                "search ranked",
                search=search.id,
                candidates=state.modeled,
                feasible=state.feasible_predicted,
                ranking_s=round(state.ranking_s, 2),
            )

    async def _conclude(
        self,
        record: SearchRecord,
        prepared: Prepared,
        setup: _Setup,
        result: SearchResult,
        *,
        started: datetime,
    ) -> None:
        spec_of = {c.key: c.spec for c, _ in setup.plan.candidates}
        record.summary = explain(result, setup.context, spec_of=spec_of)
        record.evidence = _evidence(result, setup, spec_of)
        search = record.search
        winner_config = None
        if result.outcome is Outcome.WINNER and result.winner is not None and result.winner_trial is not None:
            winner_config = _engine_config(result.winner.spec, setup.template)
            search.best_trial_id = result.winner_trial.trial_id
            search.best_engine_config.CopyFrom(winner_config)
            if result.winner_trial.metrics is not None:
                search.best_metrics.CopyFrom(result.winner_trial.metrics)
            search.verified = not result.winner_trial.simulated
        if result.baseline_trial is not None and result.baseline_trial.metrics is not None:
            search.baseline_metrics.CopyFrom(result.baseline_trial.metrics)
        search.trials_started = result.progress.trials_started
        search.trials_completed = len(result.progress.trials)
        await self._finish(
            record,
            outcome=result.outcome.value,
            error=result.error,
            started=started,
            winner=(winner_config, result.winner_trial, result.winner_class) if winner_config else None,
            baseline=result.baseline_trial,
            defaults_trial_id=next(
                (t.trial_id for t in result.progress.trials if t.candidate_key == setup.context.defaults_key),
                "",
            ),
        )
        log.info("search done", search=search.id, outcome=result.outcome.value, summary=record.summary)

    async def _finish(
        self,
        record: SearchRecord,
        *,
        outcome: str,
        error: str = "",
        started: datetime | None = None,
        winner: tuple[endpoint_pb2.EngineConfig, TrialResult | None, str] | None = None,
        baseline: TrialResult | None = None,
        defaults_trial_id: str = "",
    ) -> None:
        """Mark the search done, store it, publish search.completed."""
        search = record.search
        now = _now()
        search.state = pb.SEARCH_STATE_DONE
        search.outcome = WIRE_OUTCOME[outcome]
        search.error = error if outcome in ("failed", "cancelled") else ""
        search.end_time.FromDatetime(now)
        record.outcome = outcome
        if not record.summary:
            record.summary = f"{outcome.capitalize()}: {error}" if error else outcome
        search.summary = record.summary
        record.touch()
        await self.records.save(record)
        completed = events_pb2.SearchCompleted(
            search_id=search.id,
            profile_id=search.profile_id,
            outcome=search.outcome,
            trials=search.trials_completed,
            modeled_candidates=search.modeled_candidates,
            error=search.error,
            summary=record.summary,
            objective=search.objective or WIRE_OBJECTIVE.get(record.objective),
            defaults_trial_id=defaults_trial_id,
        )
        if winner is not None:
            config, trial, hardware_class = winner
            completed.winner.CopyFrom(config)
            if trial is not None:
                completed.winner_trial_id = trial.trial_id
                completed.verified = not trial.simulated
                if trial.metrics is not None:
                    completed.winner_metrics.CopyFrom(trial.metrics)
                completed.winner_gates.extend([g.to_proto() for g in trial.gates])
            completed.winner_hardware_class = hardware_class
        if baseline is not None:
            if baseline.metrics is not None:
                completed.baseline_metrics.CopyFrom(baseline.metrics)
            completed.baseline_gates.extend([g.to_proto() for g in baseline.gates])
        duration = Duration()
        duration.FromTimedelta(now - (started or search.create_time.ToDatetime(tzinfo=UTC)))
        completed.duration.CopyFrom(duration)
        if outcome == "winner":
            self._winner_of[search.endpoint] = search.id
        else:
            self._winner_of.pop(search.endpoint, None)
        await self._publish(EventKind.SEARCH_COMPLETED, record, completed)
        self.completed += 1
        self.stats.search_ended(
            outcome, seconds=duration.ToTimedelta().total_seconds(), trials=search.trials_completed
        )

    async def _publish(
        self,
        kind: EventKind,
        record: SearchRecord,
        payload: events_pb2.SearchStarted | events_pb2.SearchCompleted,
    ) -> None:
        event = new_event(
            kind,
            endpoint=record.search.endpoint,
            source=SOURCE,
            payload_message=payload,
            cause_id=record.cause_id,
            endpoint_uid=record.search.endpoint_uid,
        )
        event.id = _event_id(kind.value, record.search_id)
        await publish_event(self.js, event)
        self.stats.event(kind.value)

    # --- read, cancel, watch ------------------------------------------------------------------------
    async def get(self, search_id: str) -> SearchRecord:
        if not search_id:
            raise InvalidArgument("search_id: required")
        record = await self.records.get(search_id)
        if record is None:
            raise NotFound(f"search_id: search {search_id!r} not found")
        return record

    async def trials(self, search_id: str, *, limit: int, offset: int) -> tuple[list[pb.Trial], bool]:
        """A page of a known search's finished trials (NOT_FOUND for an unknown search)."""
        await self.get(search_id)
        return await self.trial_rows.page(search_id, limit=limit, offset=offset)

    async def cancel(self, search_id: str, reason: str) -> SearchRecord:
        record = await self.get(search_id)
        if record.done:
            return record
        task = self._tasks.get(search_id)
        why = f"cancelled: {reason}" if reason else "cancelled through the API"
        if task is not None:
            self._cancel_reason[search_id] = why
            # (its cancel handler records the end, shielded; a cancel lost in a NATS call is repeated)
            await cancel_and_wait([task], grace_s=CANCEL_GRACE_S)
        else:
            await self._finish(record, outcome="cancelled", error=why)
        return await self.get(search_id)

    async def watch(
        self, search_id: str, *, replay: bool, stopping: asyncio.Event | None = None
    ) -> AsyncIterator[events_pb2.Event]:
        """The search's events (search.*, trial.*), ending after its search.completed."""
        record = await self.get(search_id)
        done_at_start = record.done
        since = record.search.create_time.ToDatetime(tzinfo=UTC) if (replay or done_at_start) else _now()
        queue: asyncio.Queue[events_pb2.Event] = asyncio.Queue()

        async def on_msg(msg: Any) -> None:
            with contextlib.suppress(Exception):
                queue.put_nowait(events_pb2.Event.FromString(msg.data))

        sub = await self.js.subscribe(
            event_filter_subject(endpoint=record.search.endpoint),
            stream="EVENTS",
            cb=on_msg,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since),
        )
        stop = asyncio.create_task((stopping or asyncio.Event()).wait())
        try:
            while True:
                getting = asyncio.create_task(queue.get())
                await asyncio.wait({getting, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not getting.done():
                    getting.cancel()
                    return
                event = getting.result()
                if _search_of(event) != search_id:
                    continue
                if done_at_start and not replay and event.kind != EventKind.SEARCH_COMPLETED:
                    continue
                yield event
                if event.kind == EventKind.SEARCH_COMPLETED:
                    return
        finally:
            stop.cancel()
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


@dataclass(frozen=True)
class _Setup:
    plan: SearchPlan
    model: SearchModel
    template: JobTemplate
    context: Context
    gate_rps: float


def _search_of(event: events_pb2.Event) -> str:
    which = event.WhichOneof("payload")
    if which in ("search_started", "search_completed", "trial_progress", "trial_completed"):
        return str(getattr(event, which).search_id)
    return ""


def _engine_config(spec: EngineSpec, template: JobTemplate) -> endpoint_pb2.EngineConfig:
    config = spec.to_proto()
    config.model = template.engine_model
    return config


def _figures(trial: TrialResult | None) -> dict[str, Any] | None:
    if trial is None:
        return None

    def num(x: float) -> float | None:
        return round(x, 4) if math.isfinite(x) else None

    f = trial.figures
    return {
        "trial_id": trial.trial_id,
        "candidate": trial.candidate_key,
        "hardware_class": trial.hardware_class,
        "fidelity": trial.fidelity,
        "ok": trial.ok,
        "passed": trial.passed,
        "simulated": trial.simulated,
        "goodput_rps": num(f.goodput_rps),
        "ttft_p50_ms": num(f.ttft_p50_ms),
        "ttft_p99_ms_at_gate": num(f.ttft_p99_ms),
        "attainment_at_gate": num(f.attainment),
        "meets_slo": f.meets_slo,
        "gates": [dataclasses.asdict(g) for g in trial.gates],
        "error": trial.error,
    }


def _evidence(result: SearchResult, setup: _Setup, spec_of: dict[str, EngineSpec]) -> dict[str, Any]:
    p = result.progress
    winner = result.winner
    return {
        "outcome": result.outcome.value,
        "objective": setup.plan.objective.value,
        "winner": _figures(result.winner_trial),
        "baseline": _figures(result.baseline_trial),
        "knobs_changed": knob_changes(setup.context.base, winner.spec) if winner else [],
        "closest": knob_changes(setup.context.base, result.closest.spec) if result.closest else None,
        "ranking_s": round(p.ranking_s, 3),
        "modeled_candidates": p.modeled,
        "feasible_predicted": p.feasible_predicted,
        "recalibrations": [dataclasses.asdict(r) for r in p.recalibrations],
        "trials": [_figures(t) for t in p.trials],
        "target_rps": setup.context.target_rps,
        "gate_rps": setup.gate_rps,
        "noise_rule": _comparison(result.comparison),
    }


def _comparison(found: Comparison | None) -> dict[str, Any] | None:
    """The noise rule's judgement as JSON (None: the search had no confirmation)."""
    if found is None:
        return None
    return {**dataclasses.asdict(found), "verdict": found.verdict.value, "line": found.describe()}


def noise_rule(settings: SearcherSettings, *, objective: Objective, simulated: bool) -> NoiseRule:
    """How a search confirms its leader: repeated interleaved pairs on real hardware; none on a
    simulated class, whose trials repeat exactly."""
    if simulated:
        return NO_CONFIRMATION
    return NoiseRule(
        confirm_pairs=settings.confirm_pairs,
        min_pairs=settings.min_pairs,
        confidence=settings.noise_confidence,
        min_floor=settings.noise_min_floor,
        lower_is_better=objective is Objective.P50_TTFT,
    )


__all__ = ["Prepared", "Profile", "Searches", "TrialOrder"]
