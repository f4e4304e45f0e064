"""Deployments rolled out, promoted and rolled back: Promote, Rollback, search winners, breaches and
engine reports (over `workspace.Workspace`), each handing a canary to `canary_loop.CanaryLoop`.

What to do in answer to a call or an event is decided in `decisions.py` (pure) and carried out
here (`_carry_out`); the slow part (starting engines, the canary, draining) is a background task
that records its progress in KV, so a restarted deployer picks it up (`lifecycle.Lifecycle.resume`).

A rollout: the new deployment starts, waits until ready and is warmed up; then, with a stable
deployment to compare with, it is a canary (`canary_loop.py`) until it is promoted or rolled back
(analysis, an `sla.breach`, a failure). Without a stable deployment (the first one), with
`skip_canary`, or for a Rollback that restarts an old config, all traffic moves at once. A promoted
deployment takes 100%; the replaced one drains (in-flight requests finish) and stops. The rollout's
progress lives in its KV record, so a restarted deployer carries it on.

Cause ids: the record keeps what began the rollout (`RolloutRecord.cause_id`: the `search.completed`
event's id for a search winner, the request id of a Promote, Rollback or CreateEndpoint call), and
every `deploy.*` event of the rollout carries it; a roll back on a breach carries the breach
event's id.
"""

from __future__ import annotations

import json

from evertune.deployer import decisions, plan
from evertune.deployer.backend import EngineReport, Target
from evertune.deployer.breach import SeenBreach, why_not_the_canary
from evertune.deployer.canary_loop import CanaryLoop
from evertune.deployer.commands import PromoteCommand, RollbackCommand
from evertune.deployer.rollout_policy import RolloutPolicy, effective_policy
from evertune.deployer.state import RequestRecord, RolloutRecord, request_key
from evertune.deployer.telemetry import Telemetry
from evertune.deployer.trial_lookup import find_trial
from evertune.deployer.validation import rollout_overrides
from evertune.deployer.warmup import warm_up
from evertune.deployer.winner_check import StoredWinners
from evertune.deployer.workspace import Workspace, new_deployment_id
from evertune.domain.engines import EngineSpec
from evertune.errors import EvertuneError, FailedPrecondition, InvalidArgument, NotFound
from evertune.infra.events import EventKind
from evertune.infra.logging import bound_ids, get_logger
from evertune.infra.runtime.auth import Principal
from evertune.infra.runtime.tasks import cancel_and_wait
from evertune.v1 import common_pb2, endpoint_pb2, events_pb2

log = get_logger("evertune.deployer")

D = endpoint_pb2


class Deployments:
    """Deployments rolled out, promoted, rolled back; engine reports. One per deployer process."""

    def __init__(
        self,
        work: Workspace,
        *,
        ready_timeout_s: float,
        policy: RolloutPolicy,
        telemetry: Telemetry | None,
        winners: StoredWinners | None,
        warmup_requests: int,
        telemetry_lag_s: float,
        search_max_age_s: float,
    ) -> None:
        self.work = work  #: the shared machinery
        self.state = work.state
        self.backend = work.backend
        self.ready_timeout_s = ready_timeout_s  #: longest wait for a deployment's engines to serve
        self.policy = policy  #: the deployer's defaults (settings)
        #: reads a search's winner back from the store before it is rolled out (None: no store,
        #: and no search winner is rolled out)
        self.winners = winners
        self.warmup_requests = warmup_requests  #: requests sent to a new deployment before traffic
        self.search_max_age_s = search_max_age_s  #: an older search.completed is not rolled out
        #: the canary loops this process runs
        self.canaries = CanaryLoop(work, telemetry=telemetry, telemetry_lag_s=telemetry_lag_s)

    def policy_for(self, endpoint: endpoint_pb2.Endpoint) -> RolloutPolicy:
        """The policy a new rollout of `endpoint` runs with: its spec.rollout over the defaults."""
        return effective_policy(self.policy, rollout_overrides(endpoint.spec.rollout, field="spec.rollout"))

    def policy_of(self, record: RolloutRecord, endpoint: endpoint_pb2.Endpoint) -> RolloutPolicy:
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
            cause_id=command.request_id,
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
        cause_id: str,
    ) -> endpoint_pb2.Deployment:
        """Store a new deployment under the rollout mutex, announce it, and roll it out; `cause_id`
        (what asked for it) goes into the record and every event of the rollout."""
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
            cause_id=cause_id,
        )
        await self.state.begin_rollout(name, deployment.id, rollout)
        try:
            await self.state.create_deployment(deployment)
        except BaseException:
            await self.state.end_rollout(name, deployment.id)
            raise
        steps = [] if skip_canary or not endpoint.stable_deployment_id else list(policy.steps)
        await self.work.emit_started(deployment, trigger=trigger, steps=steps, cause_id=cause_id)
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
                cause_id=event.id,
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
        signal = self.canaries.signal(name)
        if signal is not None and signal.deployment_id == record.deployment_id:
            signal.breach(breach.breach_id, cause_id=event.id)
            return
        # Another deployer runs this rollout: it reads the record after its step.
        await self.state.change_rollout(
            name, record.deployment_id, breach_id=breach.breach_id, breach_cause_id=event.id
        )

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
                urls = await self._start_engines(endpoint, deployment, cause_id=record.cause_id)
                if urls is None:
                    return
                previous = endpoint.stable_deployment_id
                canary = bool(previous) and not record.skip_canary and await self._serving(name, previous)
                if not canary:
                    await self.work.switch_traffic(name, new=deployment_id, old=previous, urls=urls)
                    await self.work.record_promoted(name, deployment, previous, cause_id=record.cause_id)
            if not canary:
                if previous:
                    final = record.replaced_final
                    self.work.spawn(name, self.work.drain(name, previous, final=final), name="drain")
                return
            policy = self.policy_of(record, endpoint)
            await self.canaries.run(
                name, deployment, stable_id=previous, policy=policy, urls=urls, cause_id=record.cause_id
            )

    async def _start_engines(
        self, endpoint: endpoint_pb2.Endpoint, deployment: endpoint_pb2.Deployment, *, cause_id: str
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
            await self._start_failed(endpoint, deployment, str(err), cause_id=cause_id)
            return None
        return urls

    async def _serving(self, name: str, deployment_id: str) -> bool:
        """Whether `deployment_id` is in the route table with weight (a stable to compare with)."""
        table = await self.state.get_routes(name)
        return table is not None and plan.weights_of(table).get(deployment_id, 0) > 0

    async def _start_failed(
        self, endpoint: endpoint_pb2.Endpoint, deployment: endpoint_pb2.Deployment, why: str, *, cause_id: str
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
            cause_id=cause_id,
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
        touched = await self._carry_out(endpoint, steps, cause_id=command.request_id)
        return touched.get(result_id, restore)

    async def on_engine_report(self, report: EngineReport) -> None:
        """Record what the backend saw (`decisions.engine_report_steps`): an exit degrades the
        endpoint, a restart restores it, a give-up fails the deployment (or its canary loop)."""
        self.state.stats.engine_report(report.what)
        endpoint = await self.state.get_endpoint(report.endpoint)
        if endpoint is None:
            return
        signal = self.canaries.signal(report.endpoint)
        rollout = await self.state.get_rollout(report.endpoint)
        steps = decisions.engine_report_steps(
            report,
            stable_id=endpoint.stable_deployment_id,
            canary_here=signal.deployment_id if signal is not None else "",
        )
        await self._carry_out(endpoint, steps, cause_id=rollout.cause_id if rollout else "")

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
                urls = await self._start_engines(endpoint, deployment, cause_id=record.cause_id)
                if urls is None:
                    return
            policy = self.policy_of(record, endpoint)
            log.info("canary resumed", endpoint=name, step=record.step)
            await self.canaries.run(
                name,
                deployment,
                stable_id=stable_id,
                policy=policy,
                urls=urls,
                cause_id=record.cause_id,
                resume=record,
            )

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
        self, endpoint: endpoint_pb2.Endpoint, steps: list[decisions.Step], *, cause_id: str
    ) -> dict[str, endpoint_pb2.Deployment]:
        """Do `steps` in order; the deployments they wrote, by id, as last written. The events
        they announce carry `cause_id` (what asked for them)."""
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
                    signal = self.canaries.signal(name)
                    if signal is not None:
                        signal.fail(failure)  # the canary loop rolls it back
                case decisions.Relaunch():
                    touched[step.deployment_id] = await self._relaunch(endpoint, step, cause_id=cause_id)
                case decisions.AnnounceStarted(deployment_id=deployment_id):
                    await self.work.emit_started(
                        touched[deployment_id], trigger=events_pb2.DEPLOY_TRIGGER_API, cause_id=cause_id
                    )
                case decisions.AnnounceRolledBack(taken_out=taken_out, restored=restored, reason=reason):
                    await self.work.emit_rolled_back(name, taken_out, restored, reason, cause_id=cause_id)
                case decisions.RollOut(deployment_id=deployment_id):
                    self.work.spawn(name, self.roll_out(name, deployment_id), name="rollout")
                case decisions.Locked(steps=inner):
                    async with self.work.lock(name):
                        touched.update(await self._carry_out(endpoint, list(inner), cause_id=cause_id))
        return touched

    async def _relaunch(
        self, endpoint: endpoint_pb2.Endpoint, step: decisions.Relaunch, *, cause_id: str
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
            cause_id=cause_id,
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
