"""The canary loop of a rollout: weights step by step, each step analysed, until promoted or rolled
back (`CanaryLoop.run`, one per endpoint at most in a process).

`rollout.Rollout` decides (pure); this loop carries out each of its actions: a step's weight in the
record and the route table, a HOLD, the promotion, the roll back. Between steps it waits out the
step (or less, when a breach or an engine failure arrives through the endpoint's `CanarySignal`),
then analyses the step with `canary.analyse` over the arms' telemetry and announces
`deploy.canary_step`. The loop records its progress in the rollout's KV record, so a restarted
deployer resumes it at its step (`deployments.Deployments.continue_canary`).

Each rollout runs with the policy fixed in its record when it began (`rollout_policy.py`): a
rollout in flight keeps it; an UpdateEndpoint of `rollout` applies to the next one. A failed
analysis within `failures_tolerated` holds the step (its deploy.canary_step still says ROLL_BACK)
and the next analysis judges a fresh canary window. Every event of the loop carries the rollout's
cause id (what began it), a roll back on a breach the breach event's id.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from evertune.deployer import plan
from evertune.deployer.canary import Analysis, ArmWindow, Verdict, analyse
from evertune.deployer.rollout import Action, ActionKind, Rollout, Trigger
from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.deployer.state import RolloutRecord
from evertune.deployer.telemetry import Telemetry, Windows
from evertune.deployer.workspace import Workspace
from evertune.domain.percentiles import percentile_or_zero
from evertune.domain.slo import Slo
from evertune.errors import EvertuneError
from evertune.infra.events import EventKind
from evertune.infra.logging import get_logger
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


class CanarySignal:
    """How a running canary loop hears of a breach or a failure (set by the consumers)."""

    def __init__(self, deployment_id: str) -> None:
        self.deployment_id = deployment_id  #: the canary
        self.breach_id = ""  #: an sla.breach on it, when one came
        self.breach_cause_id = ""  #: that sla.breach event's id
        self.failure = ""  #: why its engines failed, when they did
        self.event = asyncio.Event()  #: set on either

    def breach(self, breach_id: str, *, cause_id: str) -> None:
        """An sla.breach judged the canary: roll it back now."""
        self.breach_id, self.breach_cause_id = breach_id, cause_id
        self.event.set()

    def fail(self, failure: str) -> None:
        """Its engines failed: roll it back now."""
        self.failure = failure
        self.event.set()

    async def wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less when a breach or failure arrives."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), seconds)


@dataclass
class _CanaryRun:
    """One canary loop's state (`CanaryLoop.run`)."""

    name: str  #: the endpoint
    deployment: endpoint_pb2.Deployment  #: the canary
    stable_id: str  #: the deployment it is compared with
    policy: RolloutPolicy  #: fixed when the rollout began
    urls: list[str]  #: the canary's replica URLs
    cause_id: str  #: what began the rollout (an event id or a request id): its events' cause
    signal: CanarySignal  #: a breach or failure heard meanwhile
    rollout: Rollout  #: the state machine that decides
    started_s: float = 0.0  #: unix time the canary first took traffic (the stable arm's window)
    step_started_s: float = 0.0  #: unix time the current step's window began (the canary's)
    analysis: Analysis | None = None  #: the last step analysis


class CanaryLoop:
    """The canary loops of this deployer process, by endpoint."""

    def __init__(self, work: Workspace, *, telemetry: Telemetry | None, telemetry_lag_s: float) -> None:
        self.work = work  #: the shared machinery
        self.state = work.state
        self.telemetry = telemetry  #: the arms' windows for canary analyses (None: every step holds)
        self.telemetry_lag_s = telemetry_lag_s  #: how far telemetry trails the requests, s
        self._signals: dict[str, CanarySignal] = {}  #: endpoint -> its running canary loop's signal
        self._last_windows: dict[str, Windows] = {}  #: canary id -> the windows just analysed

    def signal(self, name: str) -> CanarySignal | None:
        """The signal of the canary loop running for endpoint `name` here, if one runs."""
        return self._signals.get(name)

    async def run(
        self,
        name: str,
        deployment: endpoint_pb2.Deployment,
        *,
        stable_id: str,
        policy: RolloutPolicy,
        urls: list[str],
        cause_id: str,
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
            cause_id=cause_id,
            signal=CanarySignal(deployment.id),
            rollout=Rollout(policy),
            started_s=resume.started_s if resume is not None else 0.0,
        )
        self._signals[name] = run.signal
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
                await self._roll_back_canary(run, failed)
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
            if self._signals.get(name) is run.signal:
                del self._signals[name]

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
            await self._promote_canary(run)
        elif action.kind is ActionKind.ROLL_BACK:
            await self._roll_back_canary(run, action)
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
            signal.breach_cause_id = signal.breach_cause_id or record.breach_cause_id
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
        await self._emit_canary_step(run, step, action, run.analysis)
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

    async def _emit_canary_step(self, run: _CanaryRun, step: int, action: Action, analysis: Analysis) -> None:
        name, canary_id, stable_id = run.name, run.deployment.id, run.stable_id
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
                steps=len(run.policy.steps),
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
            cause_id=run.cause_id,
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

    async def _promote_canary(self, run: _CanaryRun) -> None:
        """Every step passed: the canary takes 100% and is the stable one; the old one drains."""
        name, deployment, stable_id = run.name, run.deployment, run.stable_id
        async with self.work.lock(name):
            record = await self.state.get_rollout(name)
            if record is None or record.deployment_id != deployment.id:
                return
            urls = [u for u in deployment.upstream_url.split(",") if u]
            current = await self.state.get_deployment(name, deployment.id)
            if current is not None and current.upstream_url:
                urls = [u for u in current.upstream_url.split(",") if u]
            await self.work.switch_traffic(name, new=deployment.id, old=stable_id, urls=urls)
            await self.work.record_promoted(name, deployment, stable_id, cause_id=record.cause_id)
            final = record.replaced_final
        self.work.spawn(name, self.work.drain(name, stable_id, final=final), name="drain")

    async def _roll_back_canary(self, run: _CanaryRun, action: Action) -> None:
        """Canary weight 0 and the stable back to 100% at once; deploy.rolled_back (caused by the
        breach, if one rolled it back, else by what began the rollout); then the canary drains (its
        streams in flight finish) and stops as ROLLED_BACK."""
        name, canary_id, stable_id = run.name, run.deployment.id, run.stable_id
        trigger = _TRIGGERS[action.trigger or Trigger.FAILURE]
        on_breach = trigger == events_pb2.DEPLOY_TRIGGER_BREACH
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
                    breach_id=run.signal.breach_id if on_breach else "",
                    step=action.step,
                    reason=action.reason[:500],
                ),
                severity=common_pb2.SEVERITY_WARNING,
                cause_id=(run.signal.breach_cause_id if on_breach else "") or record.cause_id,
            )
            log.warning("canary rolled back", endpoint=name, deployment=canary_id, reason=action.reason)
        self.work.spawn(
            name, self.work.drain(name, canary_id, final=D.DEPLOYMENT_STATE_ROLLED_BACK), name="drain"
        )


def _seconds(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)
