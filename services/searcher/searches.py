"""The searcher's shell: accept searches, run each as a task, keep its record, publish its events.

`SearchSupervisor` is what the gRPC API and the profile.ready consumer call:

- `start(request, trigger=, cause_id=)`: validates the request, reads the endpoint (`endpoints`
  KV), its live configuration (the stable deployment's, from `deployments`, else the endpoint's
  initial one) and the profile (`profiles` table: the one named, else the endpoint's latest),
  stores the search PENDING and runs it in a task. Idempotent on `request_id`.
  A search belongs to the endpoint's immutable id (`Endpoint.uid`), not its name: the id is stored
  on the search (`Search.endpoint_uid`, the `searches.endpoint_uid` column), carried by its events
  and its jobs (so the runners' trial events carry it too), and the profile must be one of that id
  (`profiles.endpoint_uid`): a name deleted and created again searches none of the earlier
  endpoint's profiles, and its running search does not hold the new one's back.
- the task (`_run`): writes the profile's trace where runners read it (`trace_dir`), has
  `planning.plan_search` decide the candidate space of each hardware class, the plan, the jobs'
  template and the summary's context, prepares the trace for the performance model, and calls
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
once; `search_events.py` builds them). One searcher instance per deployment: at start it ends
searches a previous instance left running as failed ("the searcher restarted").
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.domain.engines import EngineSpec, HardwareProfile, InvalidEngineConfig, get_profile
from evertune.domain.model import ensure_model
from evertune.domain.perfmodel import Efficiency, PromptTokens, load_arch, load_efficiency, prepare
from evertune.domain.perfmodel.simulate import block_size_of
from evertune.domain.workloads.source import load_workload
from evertune.errors import EvertuneError, FailedPrecondition, InvalidArgument, NotFound
from evertune.infra.bus import Bucket, publish_event
from evertune.infra.events import EventKind, decode_event, endpoint_token, event_filter_subject, new_event
from evertune.infra.logging import get_logger
from evertune.infra.runtime.tasks import cancel_and_wait
from evertune.infra.store import Store
from evertune.searcher.jobs import JobTemplate
from evertune.searcher.model import SearchModel, ThreadedModel
from evertune.searcher.orchestrate import (
    Outcome,
    SearchProgress,
    SearchResult,
    TrialOrder,
    TrialResult,
    run_search,
)
from evertune.searcher.planning import PlanRequest, SearchSetup, plan_search
from evertune.searcher.profiles import Profile, latest_profile_id, read_profile, write_trace
from evertune.searcher.records import (
    WIRE_OBJECTIVE,
    WIRE_OUTCOME,
    Incarnation,
    SearchRecord,
    SearchRecords,
    SearchTrials,
    objective_name,
)
from evertune.searcher.rollout_wait import wait_for_rollout
from evertune.searcher.search_events import Winner, completed_payload, search_event_id, started_payload
from evertune.searcher.settings import SearcherSettings
from evertune.searcher.space import SpaceLimits, unpriced_class
from evertune.searcher.stats import SearcherStats
from evertune.searcher.strategy import Objective
from evertune.searcher.summary import evidence, explain
from evertune.v1 import endpoint_pb2, events_pb2
from evertune.v1 import search_service_pb2 as pb

log = get_logger("evertune.searcher")

SOURCE = "searcher"
#: Seconds a cancelled search has to record its end before it is cancelled again.
CANCEL_GRACE_S = 10.0


@dataclass(frozen=True)
class Prepared:
    """Everything a search's task needs, read and checked when it was accepted."""

    endpoint: endpoint_pb2.Endpoint  #: the endpoint as stored
    live: endpoint_pb2.EngineConfig  #: the live configuration (the baseline)
    profile: Profile  #: the profile searched against
    classes: tuple[str, ...]  #: hardware classes


#: Runs a batch of trial orders for a search (TrialBus.execute with the search's template bound).
Executor = Callable[..., Any]


def _now() -> datetime:
    return datetime.now(UTC)


class SearchSupervisor:
    """Runs searches as tasks and keeps their records (see the module doc)."""

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
        self.stats = SearcherStats()  #: what it counts (`SearcherService.read_stats` reads the rest in)

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
        assert self._endpoints is not None, "SearchSupervisor.open() first"
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
        return await latest_profile_id(self.store, endpoint, uid)

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
        """Until the rollout of `search_id`'s winner on `endpoint` has ended, at most
        `rollout_wait_s` (`rollout_wait.wait_for_rollout`); never raises."""
        assert self._deployments is not None
        return await wait_for_rollout(
            self._deployments,
            endpoint,
            search_id,
            wait_s=self.settings.rollout_wait_s,
            appear_s=self.settings.rollout_appear_s,
        )

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
        assert self._endpoints is not None and self._deployments is not None, "SearchSupervisor.open() first"
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
        profile = await read_profile(
            self.store,
            request.endpoint,
            uid=endpoint.uid,
            profile_id=request.profile_id if request.HasField("profile_id") else None,
        )
        return Prepared(endpoint=endpoint, live=live, profile=profile, classes=classes)

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
            setup, model = await asyncio.to_thread(self._setup, record, prepared)
            result = await run_search(
                setup.plan,
                model=ThreadedModel(model),
                execute=lambda orders: self.execute(
                    orders, template=setup.template, slo=prepared.endpoint.spec.slo, gate_rps=setup.gate_rps
                ),
                progress=lambda state: self._progress(record, state, setup),
            )
        except asyncio.CancelledError:
            reason = self._cancel_reason.pop(record.search_id, "cancelled")
            try:
                await asyncio.shield(self._finish(record, outcome="cancelled", error=reason, started=started))
            except Exception:  # the end is not stored: the next start fails the search as unfinished
                log.exception("could not record the cancelled search's end", search=record.search_id)
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

    def _setup(self, record: SearchRecord, prepared: Prepared) -> tuple[SearchSetup, SearchModel]:
        """Trace file, plan (`planning.plan_search`) and model (blocking: run in a thread)."""
        s = self.settings
        spec = prepared.endpoint.spec
        model_dir = self._model_dir(spec.model or prepared.live.model)
        base = EngineSpec.from_proto(prepared.live, default_model=str(model_dir))
        trace_path, sha = write_trace(prepared.profile, s.trace_dir or self.data_dir / "searcher" / "traces")
        hardware = {name: get_profile(name) for name in prepared.classes}
        setup = plan_search(
            PlanRequest(
                search_id=record.search_id,
                endpoint=record.search.endpoint,
                endpoint_uid=record.search.endpoint_uid,
                profile_id=prepared.profile.profile_id,
                objective=Objective(record.objective),
                budget=record.search.trial_budget,
                base=base,
                engine_model=prepared.live.model,
                hardware=hardware,
                pool_replicas=max(spec.hardware_pool.max_replicas, 1),
                slo=spec.slo,
                agreement_threshold=spec.correctness_agreement_threshold,
                peak_rps=prepared.profile.peak_rps,
                trace_uri=trace_path.resolve().as_uri(),
                trace_sha256=sha,
            ),
            settings=s,
            limits=self.limits,
        )
        plan = load_workload(
            str(trace_path), duration_s=None, seed=0, rate_scale=1.0, tokenizer_dir=model_dir
        ).plan
        tokens = PromptTokens.of_folder(model_dir)
        first = prepared.classes[0]
        # The trace hashed at every block size of the space (GPU classes beside a CPU one included).
        by_block_size = {size: prepare(plan, tokens, block_size=size) for size in setup.block_sizes}
        efficiency = {
            name: self.efficiency.get(name)
            or load_efficiency(self.data_dir, hardware[name].name)
            or Efficiency()
            for name in prepared.classes
        }
        model = SearchModel(
            inputs=prepare(plan, tokens, block_size=block_size_of(base, hardware[first])),
            arch=load_arch(model_dir),
            hardware=hardware,
            efficiency=efficiency,
            slo=setup.context.slo,
            p50_target_ms=setup.context.p50_target_ms,
            target_rps=prepared.profile.peak_rps,
            ladder=s.rate_ladder,
            headroom=s.headroom,
            horizon_s=s.model_horizon_s,
            goodput=setup.context.objective is not Objective.P50_TTFT,
            live_class=unpriced_class(setup.plan.baseline.spec),
            inputs_by_block_size=by_block_size,
        )
        return setup, model

    def _model_dir(self, model: str) -> Path:
        """Where the performance model reads the served model's config and tokenizer."""
        if model and (Path(model) / "config.json").is_file():
            return Path(model)
        if self.settings.model_dir is not None:
            return self.settings.model_dir
        return ensure_model(self.data_dir, weights=False)  # the shape and the tokenizer

    async def _progress(self, record: SearchRecord, state: SearchProgress, setup: SearchSetup) -> None:
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
            started = started_payload(record, candidates=state.feasible_predicted)
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
        setup: SearchSetup,
        result: SearchResult,
        *,
        started: datetime,
    ) -> None:
        spec_of = {c.key: c.spec for c, _ in setup.plan.candidates}
        record.summary = explain(result, setup.context, spec_of=spec_of)
        record.evidence = evidence(result, setup.context)
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
            winner=Winner(config=winner_config, trial=result.winner_trial, hardware_class=result.winner_class)
            if winner_config
            else None,
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
        winner: Winner | None = None,
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
        completed = completed_payload(
            record,
            elapsed=now - (started or search.create_time.ToDatetime(tzinfo=UTC)),
            winner=winner,
            baseline=baseline,
            defaults_trial_id=defaults_trial_id,
        )
        if outcome == "winner":
            self._winner_of[search.endpoint] = search.id
        else:
            self._winner_of.pop(search.endpoint, None)
        await self._publish(EventKind.SEARCH_COMPLETED, record, completed)
        self.completed += 1
        self.stats.search_ended(
            outcome, seconds=completed.duration.ToTimedelta().total_seconds(), trials=search.trials_completed
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
        event.id = search_event_id(kind, record.search_id)
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
            event = decode_event(msg.data, subject=msg.subject)  # (one that does not decode is logged)
            if event is not None:
                queue.put_nowait(event)

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
            try:
                await sub.unsubscribe()
            except NatsError as err:  # (the connection closed: the server dropped the consumer with it)
                log.info(
                    "search watch not unsubscribed", search=search_id, error=str(err) or type(err).__name__
                )


def _search_of(event: events_pb2.Event) -> str:
    which = event.WhichOneof("payload")
    if which in ("search_started", "search_completed", "trial_progress", "trial_completed"):
        return str(getattr(event, which).search_id)
    return ""


def _engine_config(spec: EngineSpec, template: JobTemplate) -> endpoint_pb2.EngineConfig:
    config = spec.to_proto()
    config.model = template.engine_model
    return config


__all__ = ["Prepared", "Profile", "SearchSupervisor", "TrialOrder"]
