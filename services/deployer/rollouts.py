"""Deployments rolled out, promoted and rolled back: Promote, Rollback, search winners, breaches,
engine reports, and the canary loop (over `workspace.Workspace`).

What to do in answer to a call or an event is decided in `decisions.py` (pure) and carried out
here (`_carry_out`); the slow part (starting engines, the canary, draining) is a background task
that records its progress in KV, so a restarted deployer picks it up (`lifecycle.Lifecycle.resume`).

A rollout: the new deployment starts, waits until ready and is warmed up; then, with a stable
deployment to compare with, it is a canary driven by `rollout.Rollout` (weights per step, each step
analysed with `canary.analyse` over the arms' telemetry, `deploy.canary_step` each time) until it is
promoted or rolled back (analysis, an `sla.breach`, a failure). Without a stable deployment (the
first one), with `skip_canary`, or for a Rollback that restarts an old config, all traffic moves at
once. A promoted deployment takes 100%; the replaced one drains (in-flight requests finish) and
stops. The rollout's progress lives in its KV record, so a restarted deployer carries it on.

Each rollout runs with `effective_policy(deployer defaults, endpoint's spec.rollout)` (steps, step
duration, canary thresholds, failure limit), fixed in its KV record when it begins: a rollout in
flight keeps the policy it started with; an UpdateEndpoint of `rollout` applies to the next one. A
failed analysis within the failure limit holds the step (its deploy.canary_step still says
ROLL_BACK) and the next analysis judges a fresh canary window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from evertune.deployer import decisions, plan
from evertune.deployer.backend import EngineReport, Target
from evertune.deployer.breach import SeenBreach, why_not_the_canary
from evertune.deployer.canary import Analysis, ArmWindow, Verdict, analyse
from evertune.deployer.rollout import Action, ActionKind, Rollout, Trigger
from evertune.deployer.rollout_policy import RolloutPolicy, effective_policy
from evertune.deployer.state import RequestRecord, RolloutRecord, request_key
from evertune.deployer.telemetry import Telemetry, Windows
from evertune.deployer.trials import find_trial
from evertune.deployer.validation import (
    PromoteCommand,
    RollbackCommand,
    rollout_overrides,
)
from evertune.deployer.warmup import warm_up
from evertune.deployer.winner_check import StoredWinners
from evertune.deployer.workspace import Workspace, new_deployment_id

from evertune.domain.engines import EngineSpec
from evertune.domain.percentiles import percentile_or_zero
from evertune.domain.slo import Slo
from evertune.errors import (
    EvertuneError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from evertune.infra.events import EventKind
from evertune.infra.logging import bound_ids, get_logger
from evertune.infra.runtime.auth import Principal
from evertune.infra.runtime.tasks import cancel_and_wait
from evertune.v1 import common_pb2, endpoint_pb2, events_pb2

log = get_logger("evertune.deployer")

D = endpoint_pb2

_TRIGGERS: Final = {
    Trigger.CANARY_ANALYSIS: events_pb2.DEPLOY_TRIGGER_CANARY_ANALYSIS,
    Trigger.BREACH: events_pb2.DEPLOY_TRIGGER_BREACH,
    Trigger.FAILURE: events_pb2.DEPLOY_TRIGGER_FAILURE,
}
_VERDICTS: Final = {
    Verdict.PROCEED: events_pb2.CANARY_VERDICT_PROCEED,
    Verdict.HOLD: events_pb2.CANARY_VERDICT_HOLD,
    Verdict.ROLL_BACK: events_pb2.CANARY_VERDICT_ROLL_BACK,
}


class _CanarySignal:
    """How a running canary loop hears of a breach or a failure (set by the consumers)."""

    def __init__(self, deployment_id: str) -> None:
        self.deployment_id = deployment_id  #: the canary
        self.breach_id = ""  #: an sla.breach on it, when one came
        self.failure = ""  #: why its engines failed, when they did
        self.event = asyncio.Event()  #: set on either

    async def wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less when a breach or failure arrives."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), seconds)


@dataclass
class _CanaryRun:
    """One canary loop's state (`Rollouts._canary`)."""

    name: str  #: the endpoint
    deployment: endpoint_pb2.Deployment  #: the canary
    stable_id: str  #: the deployment it is compared with
    policy: RolloutPolicy  #: fixed when the rollout began
    urls: list[str]  #: the canary's replica URLs
    signal: _CanarySignal  #: a breach or failure heard meanwhile
    rollout: Rollout  #: the state machine that decides
    started_s: float = 0.0  #: unix time the canary first took traffic (the stable arm's window)
    step_started_s: float = 0.0  #: unix time the current step's window began (the canary's)
    analysis: Analysis | None = None  #: the last step analysis


class Rollouts:
    """Deployments rolled out, promoted, rolled back; engine reports. One per deployer process."""

    def __init__(
        self,
        work: Workspace,
        *,
        ready_timeout_s: float,
        policy: RolloutPolicy | None = None,
        telemetry: Telemetry | None = None,
        winners: StoredWinners | None = None,
        warmup_requests: int = 3,
        telemetry_lag_s: float = 2.0,
        search_max_age_s: float = 3600.0,
    ) -> None:
        self.work = work  #: the shared machinery
        self.state = work.state
        self.backend = work.backend
        self.ready_timeout_s = ready_timeout_s  #: longest wait for a deployment's engines to serve
        self.policy = policy or RolloutPolicy()  #: the deployer's defaults (settings)
        self.telemetry = telemetry  #: the arms' windows for canary analyses (None: every step holds)
        #: reads a search's winner back from the store before it is rolled out (None: no store,
        #: and no search winner is rolled out)
        self.winners = winners
        self.warmup_requests = warmup_requests  #: requests sent to a new deployment before traffic
        self.telemetry_lag_s = telemetry_lag_s  #: how far telemetry trails the requests, s
        self.search_max_age_s = search_max_age_s  #: an older search.completed is not rolled out
        self._canaries: dict[str, _CanarySignal] = {}  #: endpoint -> its running canary loop
        self._last_windows: dict[str, Windows] = {}  #: canary id -> the windows just analysed

    def policy_for(self, endpoint: endpoint_pb2.Endpoint) -> RolloutPolicy:
        """The policy a new rollout of `endpoint` runs with: its spec.rollout over the defaults."""
        return effective_policy(self.policy, rollout_overrides(endpoint.spec.rollout, field="spec.rollout"))

    def _policy_of(self, record: RolloutRecord, endpoint: endpoint_pb2.Endpoint) -> RolloutPolicy:
        """The policy a rollout in flight runs with: the one fixed in its record when it began
        (a record without one, from an older deployer: the endpoint's now)."""
        return RolloutPolicy.model_validate(record.policy) if record.policy else self.policy_for(endpoint)

    async def promote(self, command: PromoteCommand, caller: Principal) -> endpoint_pb2.Deployment:
        endpoint = await self.work.visible_endpoint(command.endpoint, caller)
        name = command.endpoint
        key = request_key(tenant=endpoint.spec.tenant, rpc="promote", request_id=command.request_id)
        existing = await self.state.requests.get(key)
        if existing is not None:
            return await self._repeat(key, command.fingerprint, name, rpc="promote")
        self._check_can_roll_out(endpoint)
        search_id = ""
        engine = command.engine
        if engine is None:
            trial = await find_trial(self.state.js, endpoint=name, trial_id=command.trial_id)
            engine = EngineSpec.from_proto(trial.engine_config, default_model=endpoint.spec.model)
            search_id = trial.search_id
        record = RequestRecord(
            rpc="promote", fingerprint=command.fingerprint, endpoint=name, deployment_id=new_deployment_id()
        )
        self.backend.check(
            Target(
                deployment_id=record.deployment_id,
                endpoint=name,
                engine=engine,
                hardware_class=endpoint.spec.hardware_pool.hardware_class,
                tenant=endpoint.spec.tenant,
            )
        )
        if await self.state.claim_request(key, record) is not None:
            return await self._repeat(key, command.fingerprint, name, rpc="promote")
        return await self._begin(
            endpoint,
            record.deployment_id,
            engine,
            origin=D.DEPLOYMENT_ORIGIN_PROMOTE,
            trigger=events_pb2.DEPLOY_TRIGGER_API,
            trial_id=command.trial_id,
            search_id=search_id,
            reason=command.reason,
            skip_canary=command.skip_canary,
        )

    async def _begin(
        self,
        endpoint: endpoint_pb2.Endpoint,
        deployment_id: str,
        engine: EngineSpec,
        *,
        origin: int,
        trigger: int,
        trial_id: str,
        search_id: str,
        reason: str,
        skip_canary: bool,
    ) -> endpoint_pb2.Deployment:
        """Store a new deployment under the rollout mutex, announce it, and roll it out."""
        name = endpoint.spec.name
        deployment = self.work.new_deployment(
            name,
            deployment_id,
            engine,
            origin=origin,
            now=self.state.clock(),
            previous=endpoint.stable_deployment_id,
            trial_id=trial_id,
            search_id=search_id,
            message=reason,
        )
        policy = self.policy_for(endpoint)
        rollout = RolloutRecord(
            deployment_id=deployment_id,
            skip_canary=skip_canary,
            trigger=trigger,
            policy=policy.model_dump(mode="json"),
        )
        await self.state.begin_rollout(name, deployment.id, rollout)
        try:
            await self.state.create_deployment(deployment)
        except BaseException:
            await self.state.end_rollout(name, deployment.id)
            raise
        steps = [] if skip_canary or not endpoint.stable_deployment_id else list(policy.steps)
        await self.work.emit_started(deployment, trigger=trigger, steps=steps)
        self.work.spawn(name, self.roll_out(name, deployment.id), name="rollout")
        return deployment

    async def on_search_completed(self, event: events_pb2.Event) -> None:
        """Roll out a search's winner when `decisions.search_winner` says so and the store confirms
        the search (idempotent on the search id); log why not otherwise."""
        name = event.endpoint
        done = event.search_completed
        where = {"endpoint": name, "search": done.search_id}
        endpoint = await self.state.get_endpoint(name) if name else None
        if endpoint is None:
            log.info("search.completed for no endpoint of ours; ignored", **where)
            return
        stable = (
            await self.state.get_deployment(name, endpoint.stable_deployment_id)
            if endpoint.stable_deployment_id
            else None
        )
        model = endpoint.spec.model
        stable_engine = EngineSpec.from_proto(stable.engine_config, default_model=model) if stable else None
        verdict = decisions.search_winner(
            event,
            endpoint=endpoint,
            stable_engine=stable_engine,
            now=self.state.clock(),
            max_age_s=self.search_max_age_s,
        )
        if verdict.engine is None:
            say = log.warning if verdict.warning else log.info
            say("search winner not rolled out", **where, reason=verdict.reason)
            return
        pool = endpoint.spec.hardware_pool.hardware_class
        if self.winners is None:
            log.warning("no store to read the search back from: its winner is not rolled out", **where)
            return
        refusal = await self.winners.refusal(
            endpoint=name, endpoint_uid=endpoint.uid, model=model, pool=pool, done=done
        )
        if refusal:
            log.warning("search winner not confirmed by the store: not rolled out", **where, reason=refusal)
            return
        key = request_key(tenant=endpoint.spec.tenant, rpc="search", request_id=done.search_id)
        record = RequestRecord(
            rpc="search", fingerprint=done.search_id, endpoint=name, deployment_id=new_deployment_id()
        )
        try:
            self._check_can_roll_out(endpoint)
            self.backend.check(
                Target(
                    deployment_id=record.deployment_id,
                    endpoint=name,
                    engine=verdict.engine,
                    hardware_class=pool,
                    tenant=endpoint.spec.tenant,
                )
            )
            if await self.state.claim_request(key, record) is not None:
                log.info("search winner already rolled out (redelivered)", **where)
                return
            deployment = await self._begin(
                endpoint,
                record.deployment_id,
                verdict.engine,
                origin=D.DEPLOYMENT_ORIGIN_SEARCH,
                trigger=events_pb2.DEPLOY_TRIGGER_SEARCH,
                trial_id=done.winner_trial_id,
                search_id=done.search_id,
                reason=f"winner of search {done.search_id}",
                skip_canary=False,
            )
        except (FailedPrecondition, InvalidArgument) as err:
            log.warning("search winner not rolled out", **where, reason=str(err))
            return
        log.info("rolling out a search winner", **where, deployment=deployment.id)

    async def on_breach(self, event: events_pb2.Event) -> None:
        """An sla.breach: roll back the endpoint's canary when the breach judges it
        (`breach.why_not_the_canary`: it names the canary, or it is endpoint-wide once the canary
        takes all the traffic); any other breach changes nothing."""
        name = event.endpoint
        breach = event.sla_breach
        record = await self.state.get_rollout(name) if name else None
        if record is None:
            return
        seen = SeenBreach(
            deployment=breach.deployment,
            at_s=event.time.ToNanoseconds() / 1e9,
            short_window_s=breach.short_window.ToTimedelta().total_seconds(),
            paging=event.severity not in (common_pb2.SEVERITY_INFO, common_pb2.SEVERITY_WARNING),
        )
        reason = why_not_the_canary(seen, record)
        if reason:
            log.info("breach during a rollout; the canary stays", endpoint=name, reason=reason)
            return
        signal = self._canaries.get(name)
        if signal is not None and signal.deployment_id == record.deployment_id:
            signal.breach_id = breach.breach_id
            signal.event.set()
            return
        # Another deployer runs this rollout: it reads the record after its step.
        await self.state.change_rollout(name, record.deployment_id, breach_id=breach.breach_id)

    def _check_can_roll_out(self, endpoint: endpoint_pb2.Endpoint) -> None:
        name = endpoint.spec.name
        if endpoint.state == D.ENDPOINT_STATE_DELETING:
            raise FailedPrecondition(f"endpoint {name} is being deleted")
        if endpoint.state == D.ENDPOINT_STATE_PROVISIONING:
            raise FailedPrecondition(f"endpoint {name} is still provisioning its first deployment")

    async def _repeat(self, key: str, fingerprint: str, name: str, *, rpc: str) -> endpoint_pb2.Deployment:
        """The answer to a retried Promote/Rollback: the deployment the first call made."""
        entry = await self.state.requests.get(key)
        if entry is None:
            raise FailedPrecondition("request_id: the earlier request expired; retry with a new request_id")
        record = RequestRecord(**json.loads(entry.value))
        if record.fingerprint != fingerprint or record.rpc != rpc:
            raise InvalidArgument(
                "request_id: already used with a different request; choose a new request_id"
            )
        deployment = await self.state.get_deployment(name, record.deployment_id)
        if deployment is None:
            raise NotFound(f"deployment {record.deployment_id} of the earlier request is gone")
        return deployment

    async def roll_out(self, name: str, deployment_id: str) -> None:
        """Start the deployment, wait until ready, warm it up; then the canary (with a stable to
        compare with) or all traffic at once. A failed start marks it FAILED, traffic unchanged."""
        with bound_ids(deployment=deployment_id):
            async with self.work.lock(name):
                endpoint = await self.state.get_endpoint(name)
                deployment = await self.state.get_deployment(name, deployment_id)
                if endpoint is None or deployment is None or deployment.state not in plan.ROLLOUT_STATES:
                    await self.state.end_rollout(name, deployment_id)
                    return
                record = await self.state.get_rollout(name)
                if record is None or record.deployment_id != deployment_id:
                    record = RolloutRecord(deployment_id=deployment_id, skip_canary=True)
                await self.work.set_deployment(name, deployment_id, state=D.DEPLOYMENT_STATE_STARTING)
                urls = await self._start_engines(endpoint, deployment)
                if urls is None:
                    return
                previous = endpoint.stable_deployment_id
                canary = bool(previous) and not record.skip_canary and await self._serving(name, previous)
                if not canary:
                    await self._switch_traffic(name, new=deployment_id, old=previous, urls=urls)
                    await self._promoted(name, deployment, previous)
            if not canary:
                if previous:
                    final = record.replaced_final
                    self.work.spawn(name, self.work.drain(name, previous, final=final), name="drain")
                return
            policy = self._policy_of(record, endpoint)
            await self._canary(name, deployment, stable_id=previous, policy=policy, urls=urls)

    async def _start_engines(
        self, endpoint: endpoint_pb2.Endpoint, deployment: endpoint_pb2.Deployment
    ) -> list[str] | None:
        """Start, wait until ready, warm up; the URLs, or None after `_start_failed`."""
        name = endpoint.spec.name
        target = _target(endpoint, deployment)
        try:
            urls = await self.backend.start(target)
            await self.work.set_deployment(name, deployment.id, upstream_url=",".join(urls))
            await self.backend.wait_ready(deployment.id, self.ready_timeout_s)
            if self.backend.reachable:
                await warm_up(urls, model=name, requests=self.warmup_requests)
        except EvertuneError as err:
            await self._start_failed(endpoint, deployment, str(err))
            return None
        return urls

    async def _serving(self, name: str, deployment_id: str) -> bool:
        """Whether `deployment_id` is in the route table with weight (a stable to compare with)."""
        table = await self.state.get_routes(name)
        return table is not None and plan.weights_of(table).get(deployment_id, 0) > 0

    async def _promoted(self, name: str, deployment: endpoint_pb2.Deployment, previous: str) -> None:
        """Record that `deployment` took all traffic: ACTIVE, the endpoint's stable, the mutex
        released, deploy.promoted."""
        await self.work.set_deployment(name, deployment.id, state=D.DEPLOYMENT_STATE_ACTIVE)
        if previous:
            await self.work.set_deployment(name, previous, state=D.DEPLOYMENT_STATE_DRAINING)
        await self.work.set_endpoint_state(name, D.ENDPOINT_STATE_READY, "", stable=deployment.id)
        await self.state.end_rollout(name, deployment.id)
        promoted = events_pb2.DeployPromoted(
            deployment_id=deployment.id,
            previous_deployment_id=previous,
            engine_config=deployment.engine_config,
        )
        started = deployment.create_time.ToDatetime()
        promoted.rollout_duration.FromTimedelta(self.state.clock().replace(tzinfo=None) - started)
        await self.state.emit(EventKind.DEPLOY_PROMOTED, name, promoted)
        log.info("deployment promoted", endpoint=name, deployment=deployment.id)

    async def _switch_traffic(self, name: str, *, new: str, old: str, urls: list[str]) -> None:
        """All weight to `new` at once; `old` stays listed at weight 0 while it drains."""
        await self.work.write_routes(name, plan.AllTo(new), new_urls={new: urls})
        if old:
            await self.work.set_deployment(name, old, state=D.DEPLOYMENT_STATE_DRAINING)

    async def _canary(
        self,
        name: str,
        deployment: endpoint_pb2.Deployment,
        *,
        stable_id: str,
        policy: RolloutPolicy,
        urls: list[str],
        resume: RolloutRecord | None = None,
    ) -> None:
        """Drive `Rollout` until the canary is promoted or rolled back (see the module docstring):
        take each action (`_take`), then wait out the step and hear what comes next (`_next`). Any
        error on the way rolls back to the stable: a rollout is never left half way."""
        run = _CanaryRun(
            name=name,
            deployment=deployment,
            stable_id=stable_id,
            policy=policy,
            urls=urls,
            signal=_CanarySignal(deployment.id),
            rollout=Rollout(policy),
            started_s=resume.started_s if resume is not None else 0.0,
        )
        self._canaries[name] = run.signal
        try:
            await self.state.change_rollout(
                name, deployment.id, stable_id=stable_id, policy=policy.model_dump(mode="json")
            )
            await self.work.set_deployment(name, deployment.id, state=D.DEPLOYMENT_STATE_CANARY)
            if resume is None:
                action: Action | None = run.rollout.ready()
            else:
                action = run.rollout.resume(step=resume.step, failures=resume.failures)
            while action is not None and await self._take(run, action):
                action = await self._next(run)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.error("canary failed", endpoint=name, error=str(err) or repr(err), exc_info=True)
            try:
                failed = run.rollout.on_failure(f"rollout error: {err}"[:300])
                await self._roll_back_canary(name, deployment.id, stable_id, failed, "")
            except Exception as rollback_err:
                # the endpoint may be left split between canary and stable: a person must look
                log.error(
                    "canary roll back failed; the endpoint's routes and rollout record need a look",
                    endpoint=name,
                    canary=deployment.id,
                    stable=stable_id,
                    error=str(rollback_err) or repr(rollback_err),
                    exc_info=True,
                )
        finally:
            if self._canaries.get(name) is run.signal:
                del self._canaries[name]

    async def _take(self, run: _CanaryRun, action: Action) -> bool:
        """Carry out one of `Rollout`'s actions; whether the canary goes on to another step."""
        name, canary_id = run.name, run.deployment.id
        if action.kind is ActionKind.SET_WEIGHT:
            run.step_started_s = self.state.clock().timestamp()
            run.started_s = run.started_s or run.step_started_s
            # The record first, then the routes: a deployer stopped in between resumes at this
            # step (resume re-applies its weight), never behind the live weights.
            await self.state.change_rollout(
                name,
                canary_id,
                step=action.step,
                weight=action.weight,
                started_s=run.started_s,
                step_started_s=run.step_started_s,
                failures=run.rollout.failures,
            )
            split = plan.CanarySplit(
                stable_id=run.stable_id, canary_id=canary_id, canary_weight=action.weight
            )
            await self.work.write_routes(name, split, new_urls={canary_id: run.urls})
            self.state.stats.rollout_steps += 1
            log.info("canary step", endpoint=name, step=action.step, weight=action.weight)
            return True
        if action.kind is ActionKind.HOLD:
            if run.analysis is not None and run.analysis.verdict is Verdict.ROLL_BACK:
                # a tolerated failure: the next analysis judges a fresh canary window
                run.step_started_s = self.state.clock().timestamp()
            await self.state.change_rollout(
                name, canary_id, failures=run.rollout.failures, step_started_s=run.step_started_s
            )
            return True
        if action.kind is ActionKind.PROMOTE:
            await self._promote_canary(name, run.deployment, run.stable_id)
        elif action.kind is ActionKind.ROLL_BACK:
            await self._roll_back_canary(name, canary_id, run.stable_id, action, run.signal.breach_id)
        return False

    async def _next(self, run: _CanaryRun) -> Action | None:
        """Wait out the step (or less, when a breach or failure comes), then `Rollout`'s next
        action: on a breach, a failure, or the step's analysis; None when a Rollback or a delete
        took the endpoint meanwhile."""
        name, canary_id, signal = run.name, run.deployment.id, run.signal
        await signal.wait(run.policy.step_duration_s + self.telemetry_lag_s)
        record = await self.state.get_rollout(name)
        if record is None or record.deployment_id != canary_id:
            return None
        if signal.breach_id or record.breach_id:
            signal.breach_id = signal.breach_id or record.breach_id
            return run.rollout.on_breach(signal.breach_id)
        if signal.failure:
            return run.rollout.on_failure(signal.failure)
        analysing = time.monotonic()
        run.analysis = await self._analyse(
            name,
            canary_id,
            run.stable_id,
            policy=run.policy,
            since_s=run.started_s,
            step_since_s=run.step_started_s,
        )
        self.state.stats.analysis_seconds.observe(time.monotonic() - analysing)
        step = run.rollout.step
        action = run.rollout.on_analysis(run.analysis)
        await self._emit_canary_step(name, canary_id, run.stable_id, step, run.policy, action, run.analysis)
        return action

    async def _analyse(
        self,
        name: str,
        canary_id: str,
        stable_id: str,
        *,
        policy: RolloutPolicy,
        since_s: float,
        step_since_s: float,
    ) -> Analysis:
        """The step's verdict from the arms' telemetry (HOLD when there is none to read)."""
        endpoint = await self.state.get_endpoint(name)
        if endpoint is None:
            return Analysis(verdict=Verdict.HOLD, reason="the endpoint is gone")
        slo = Slo.from_proto(endpoint.spec.slo)
        if self.telemetry is None:
            return Analysis(verdict=Verdict.HOLD, reason="no telemetry store to analyse the canary with")
        tz = self.state.clock().tzinfo
        until = self.state.clock() - _seconds(self.telemetry_lag_s)
        try:
            windows = await self.telemetry.windows(
                endpoint=name,
                canary=canary_id,
                stable=stable_id,
                canary_since=datetime.fromtimestamp(step_since_s, tz),
                stable_since=datetime.fromtimestamp(since_s, tz),
                until=until,
                slo=slo,
            )
        except EvertuneError as err:
            return Analysis(verdict=Verdict.HOLD, reason=f"telemetry unavailable: {err}")
        self._last_windows[canary_id] = windows
        return analyse(
            canary=windows.canary, stable=windows.stable, policy=policy, attainment_target=slo.share
        )

    async def _emit_canary_step(
        self,
        name: str,
        canary_id: str,
        stable_id: str,
        step: int,
        policy: RolloutPolicy,
        action: Action,
        analysis: Analysis,
    ) -> None:
        windows = self._last_windows.pop(canary_id, None)
        empty = ArmWindow(ttft_ms=[], itl_p99_ms=[], requests=0, errors=0)
        canary = windows.canary if windows else empty
        stable = windows.stable if windows else empty
        await self.state.emit(
            EventKind.DEPLOY_CANARY_STEP,
            name,
            events_pb2.DeployCanaryStep(
                deployment_id=canary_id,
                stable_deployment_id=stable_id,
                step=step,
                steps=len(policy.steps),
                weight=action.weight,
                verdict=_VERDICTS[analysis.verdict],
                canary_ttft_p99_ms=percentile_or_zero(canary.ttft_ms, 99.0),
                stable_ttft_p99_ms=percentile_or_zero(stable.ttft_ms, 99.0),
                canary_attainment=canary.attainment or 0.0,
                stable_attainment=stable.attainment or 0.0,
                canary_error_share=canary.error_share,
                canary_requests=canary.requests,
            ),
            severity=common_pb2.SEVERITY_WARNING if analysis.verdict is Verdict.ROLL_BACK else None,
        )
        log.info(
            "canary analysed",
            endpoint=name,
            step=step,
            verdict=analysis.verdict.value,
            reason=analysis.reason,
            canary_requests=canary.requests,
            stable_requests=stable.requests,
        )

    async def _promote_canary(self, name: str, deployment: endpoint_pb2.Deployment, stable_id: str) -> None:
        """Every step passed: the canary takes 100% and is the stable one; the old one drains."""
        async with self.work.lock(name):
            record = await self.state.get_rollout(name)
            if record is None or record.deployment_id != deployment.id:
                return
            urls = [u for u in deployment.upstream_url.split(",") if u]
            current = await self.state.get_deployment(name, deployment.id)
            if current is not None and current.upstream_url:
                urls = [u for u in current.upstream_url.split(",") if u]
            await self._switch_traffic(name, new=deployment.id, old=stable_id, urls=urls)
            await self._promoted(name, deployment, stable_id)
            final = record.replaced_final
        self.work.spawn(name, self.work.drain(name, stable_id, final=final), name="drain")

    async def _roll_back_canary(
        self, name: str, canary_id: str, stable_id: str, action: Action, breach_id: str
    ) -> None:
        """Canary weight 0 and the stable back to 100% at once; deploy.rolled_back; then the
        canary drains (its streams in flight finish) and stops as ROLLED_BACK."""
        trigger = _TRIGGERS[action.trigger or Trigger.FAILURE]
        async with self.work.lock(name):
            record = await self.state.get_rollout(name)
            if record is None or record.deployment_id != canary_id:
                return
            await self.work.write_routes(
                name, plan.CanarySplit(stable_id=stable_id, canary_id=canary_id, canary_weight=0)
            )
            await self.work.set_deployment(name, canary_id, message=action.reason)
            await self.state.end_rollout(name, canary_id)
            await self.state.emit(
                EventKind.DEPLOY_ROLLED_BACK,
                name,
                events_pb2.DeployRolledBack(
                    deployment_id=canary_id,
                    restored_deployment_id=stable_id,
                    trigger=trigger,
                    breach_id=breach_id if trigger == events_pb2.DEPLOY_TRIGGER_BREACH else "",
                    step=action.step,
                    reason=action.reason[:500],
                ),
                severity=common_pb2.SEVERITY_WARNING,
            )
            log.warning("canary rolled back", endpoint=name, deployment=canary_id, reason=action.reason)
        self.work.spawn(
            name, self.work.drain(name, canary_id, final=D.DEPLOYMENT_STATE_ROLLED_BACK), name="drain"
        )

    async def _start_failed(
        self, endpoint: endpoint_pb2.Endpoint, deployment: endpoint_pb2.Deployment, why: str
    ) -> None:
        name = endpoint.spec.name
        log.warning("deployment failed to start", endpoint=name, deployment=deployment.id, error=why)
        await self.backend.stop(deployment.id)
        table = await self.state.get_routes(name)
        if table is not None and deployment.id in plan.weights_of(table):
            await self.work.write_routes(name, plan.Without(deployment.id))
        await self.work.set_deployment(name, deployment.id, state=D.DEPLOYMENT_STATE_FAILED, message=why)
        await self.state.end_rollout(name, deployment.id)
        if not endpoint.stable_deployment_id:
            await self.work.set_endpoint_state(
                name, D.ENDPOINT_STATE_FAILED, f"first deployment failed: {why}"
            )
            return
        await self.state.emit(
            EventKind.DEPLOY_ROLLED_BACK,
            name,
            events_pb2.DeployRolledBack(
                deployment_id=deployment.id,
                restored_deployment_id=endpoint.stable_deployment_id,
                trigger=events_pb2.DEPLOY_TRIGGER_FAILURE,
                reason=why[:500],
            ),
        )

    async def rollback(self, command: RollbackCommand, caller: Principal) -> endpoint_pb2.Deployment:
        """Traffic back to an earlier deployment (`plan.plan_rollback` chooses it; idempotent on
        the request id); the steps are `decisions.rollback_steps`'. Returns the deployment that
        serves: the target, or the new deployment that brings a stopped target's config back."""
        endpoint = await self.work.visible_endpoint(command.endpoint, caller)
        name = command.endpoint
        if endpoint.state == D.ENDPOINT_STATE_DELETING:
            raise FailedPrecondition(f"endpoint {name} is being deleted")
        key = request_key(tenant=endpoint.spec.tenant, rpc="rollback", request_id=command.request_id)
        if await self.state.requests.get(key) is not None:
            return await self._repeat(key, command.fingerprint, name, rpc="rollback")
        deployments = await self.state.list_deployments(name)
        chosen = plan.plan_rollback(
            stable_id=endpoint.stable_deployment_id,
            deployments=deployments,
            to_deployment_id=command.to_deployment_id,
        )
        restore = chosen.restore
        restart = chosen.restart
        if not restart:  # a draining target: stop its drain, and restart it if it got stopped
            drain = self.work.draining.get(restore.id)
            if drain is not None:
                await cancel_and_wait([drain])
            restart = restore.id not in self.backend.running()
        result_id = new_deployment_id() if restart else restore.id
        record = RequestRecord(
            rpc="rollback", fingerprint=command.fingerprint, endpoint=name, deployment_id=result_id
        )
        if await self.state.claim_request(key, record) is not None:
            return await self._repeat(key, command.fingerprint, name, rpc="rollback")
        steps = decisions.rollback_steps(
            chosen,
            stable_id=endpoint.stable_deployment_id,
            in_progress=plan.rollout_in_progress(deployments),
            restart=restart,
            result_id=result_id,
            reason=command.reason,
        )
        touched = await self._carry_out(endpoint, steps)
        return touched.get(result_id, restore)

    async def on_engine_report(self, report: EngineReport) -> None:
        """Record what the backend saw (`decisions.engine_report_steps`): an exit degrades the
        endpoint, a restart restores it, a give-up fails the deployment (or its canary loop)."""
        self.state.stats.engine_report(report.what)
        endpoint = await self.state.get_endpoint(report.endpoint)
        if endpoint is None:
            return
        signal = self._canaries.get(report.endpoint)
        steps = decisions.engine_report_steps(
            report,
            stable_id=endpoint.stable_deployment_id,
            canary_here=signal.deployment_id if signal is not None else "",
        )
        await self._carry_out(endpoint, steps)

    async def continue_canary(
        self, endpoint: endpoint_pb2.Endpoint, deployment: endpoint_pb2.Deployment
    ) -> None:
        """A canary a previous deployer left: no traffic until its engines serve again, then back
        to the step its record names (fresh windows); rolled back if it cannot start again."""
        name = endpoint.spec.name
        with bound_ids(deployment=deployment.id):
            async with self.work.lock(name):
                record = await self.state.get_rollout(name)
                stable_id = (record.stable_id if record else "") or endpoint.stable_deployment_id
                if record is None or record.deployment_id != deployment.id or not stable_id:
                    await self.work.write_routes(name, plan.Without(deployment.id))
                    await self.work.set_deployment(
                        name,
                        deployment.id,
                        state=D.DEPLOYMENT_STATE_ROLLED_BACK,
                        message="its rollout record was gone when the deployer restarted",
                    )
                    return
                # No traffic to it until its engines serve again.
                change = plan.CanarySplit(stable_id=stable_id, canary_id=deployment.id, canary_weight=0)
                await self.work.write_routes(name, change)
                urls = await self._start_engines(endpoint, deployment)
                if urls is None:
                    return
            policy = self._policy_of(record, endpoint)
            log.info("canary resumed", endpoint=name, step=record.step)
            await self._canary(name, deployment, stable_id=stable_id, policy=policy, urls=urls, resume=record)

    async def restart(self, endpoint: endpoint_pb2.Endpoint, deployment: endpoint_pb2.Deployment) -> None:
        """Start an ACTIVE deployment's engines again and point its routes at them."""
        name = endpoint.spec.name
        target = _target(endpoint, deployment)
        async with self.work.lock(name):
            try:
                urls = await self.backend.start(target)
                await self.backend.wait_ready(deployment.id, self.ready_timeout_s)
            except EvertuneError as err:
                await self.work.set_deployment(name, deployment.id, message=f"restart failed: {err}")
                await self.work.set_endpoint_state(
                    name, D.ENDPOINT_STATE_DEGRADED, f"{deployment.id}: restart failed: {err}"
                )
                return
            await self.work.write_routes(
                name,
                plan.Rejoin(deployment.id, weight=deployment.weight),
                new_urls={deployment.id: urls},
            )
            await self.work.set_deployment(name, deployment.id, upstream_url=",".join(urls), message="")
            if endpoint.stable_deployment_id == deployment.id:
                await self.work.set_endpoint_state(name, D.ENDPOINT_STATE_READY, "")

    async def _carry_out(
        self, endpoint: endpoint_pb2.Endpoint, steps: list[decisions.Step]
    ) -> dict[str, endpoint_pb2.Deployment]:
        """Do `steps` in order; the deployments they wrote, by id, as last written."""
        name = endpoint.spec.name
        touched: dict[str, endpoint_pb2.Deployment] = {}
        for step in steps:
            match step:
                case decisions.Reroute(change=change, urls=urls):
                    await self.work.write_routes(name, change, new_urls=urls)
                case decisions.Mark(deployment_id=deployment_id, state=state, message=message):
                    touched[deployment_id] = await self.work.set_deployment(
                        name, deployment_id, state=state, message=message
                    )
                case decisions.MarkEndpoint(state=state, message=message, stable_id=stable_id):
                    await self.work.set_endpoint_state(name, state, message, stable=stable_id)
                case decisions.StopEngines(deployment_id=deployment_id):
                    await self.backend.stop(deployment_id)
                case decisions.Drain(deployment_id=deployment_id, final=final):
                    self.work.spawn(name, self.work.drain(name, deployment_id, final=final), name="drain")
                case decisions.EndRollout(deployment_id=deployment_id):
                    await self.state.end_rollout(name, deployment_id)
                case decisions.CancelWork():
                    await self.work.cancel_work(name)
                case decisions.TellCanary(failure=failure):
                    signal = self._canaries.get(name)
                    if signal is not None:
                        signal.failure = failure
                        signal.event.set()  # the canary loop rolls it back
                case decisions.Relaunch():
                    touched[step.deployment_id] = await self._relaunch(endpoint, step)
                case decisions.AnnounceStarted(deployment_id=deployment_id):
                    await self.work.emit_started(
                        touched[deployment_id], trigger=events_pb2.DEPLOY_TRIGGER_API
                    )
                case decisions.AnnounceRolledBack(taken_out=taken_out, restored=restored, reason=reason):
                    await self.work.emit_rolled_back(name, taken_out, restored, reason)
                case decisions.RollOut(deployment_id=deployment_id):
                    self.work.spawn(name, self.roll_out(name, deployment_id), name="rollout")
                case decisions.Locked(steps=inner):
                    async with self.work.lock(name):
                        touched.update(await self._carry_out(endpoint, list(inner)))
        return touched

    async def _relaunch(
        self, endpoint: endpoint_pb2.Endpoint, step: decisions.Relaunch
    ) -> endpoint_pb2.Deployment:
        """A new deployment with a stopped one's configuration, its rollout record, stored."""
        name = endpoint.spec.name
        deployment = self.work.new_deployment(
            name,
            step.deployment_id,
            EngineSpec.from_proto(step.engine_config, default_model=endpoint.spec.model),
            origin=D.DEPLOYMENT_ORIGIN_ROLLBACK,
            now=self.state.clock(),
            previous=step.previous_id,
            message=step.message,
        )
        rollout = RolloutRecord(
            deployment_id=deployment.id,
            skip_canary=True,  # a way back is taken at once, not by canary
            trigger=events_pb2.DEPLOY_TRIGGER_API,
            replaced_final=D.DEPLOYMENT_STATE_ROLLED_BACK,
        )
        await self.state.begin_rollout(name, deployment.id, rollout)
        await self.state.create_deployment(deployment)
        return deployment


def _target(endpoint: endpoint_pb2.Endpoint, deployment: endpoint_pb2.Deployment) -> Target:
    """What the backend starts for `deployment` of `endpoint`."""
    return Target(
        deployment_id=deployment.id,
        endpoint=endpoint.spec.name,
        engine=EngineSpec.from_proto(deployment.engine_config, default_model=endpoint.spec.model),
        hardware_class=endpoint.spec.hardware_pool.hardware_class,
        tenant=endpoint.spec.tenant,
    )


def _seconds(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)
