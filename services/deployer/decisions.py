"""What the deployer does in answer to an event or a call (pure): a verdict, or ordered steps.

The shell (`deployments.Deployments`) gathers the facts (KV reads, which engines run), asks a
function here, and carries the answer out (`Deployments._carry_out`), one step after another. So
every branch of a search winner, an engine report or a rollback is a table test of plain values
(`tests/deployer/test_decisions.py`), and the shell holds no decision of its own. No I/O and no
clock: callers pass `now`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from evertune.deployer.backend import EngineReport
from evertune.deployer.plan import AllTo, RollbackPlan, Silence, WeightChange, Without
from evertune.domain.engines import EngineSpec
from evertune.v1 import endpoint_pb2, events_pb2

D = endpoint_pb2

# -- the steps ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reroute:
    """Rewrite the endpoint's route table (the deployments' records follow its weights)."""

    change: WeightChange  #: the weights next, from the weights now
    urls: dict[str, list[str]] = field(default_factory=dict)  #: replica URLs to (re)list, by deployment


@dataclass(frozen=True)
class Mark:
    """Change a deployment's record (a stopped state also sets its weight to 0)."""

    deployment_id: str  #: the deployment
    state: int | None = None  #: its new DeploymentState; None: unchanged
    message: str | None = None  #: its new state message; None: unchanged


@dataclass(frozen=True)
class MarkEndpoint:
    """Change the endpoint's state."""

    state: int  #: its new EndpointState
    message: str  #: its state message ("" clears it)
    stable_id: str | None = None  #: its new stable deployment; None: unchanged


@dataclass(frozen=True)
class StopEngines:
    """Stop a deployment's engines at once (nothing in flight is waited for)."""

    deployment_id: str  #: the deployment


@dataclass(frozen=True)
class Drain:
    """In the background: no new requests, wait for those in flight, stop, set `final`."""

    deployment_id: str  #: the deployment
    final: int  #: DeploymentState it ends in (RETIRED, ROLLED_BACK)


@dataclass(frozen=True)
class EndRollout:
    """Release the endpoint's rollout mutex held by `deployment_id`."""

    deployment_id: str  #: the deployment whose rollout ends


@dataclass(frozen=True)
class CancelWork:
    """Cancel the endpoint's background work (a rollout or drain in flight); its progress is in KV."""


@dataclass(frozen=True)
class TellCanary:
    """Wake the canary loop this deployer runs: its engines failed, so it rolls back."""

    failure: str  #: why, one line


@dataclass(frozen=True)
class Relaunch:
    """A new deployment (origin ROLLBACK) with the engine configuration of a stopped one, its
    rollout record (all traffic at once, the replaced deployment ends ROLLED_BACK), stored."""

    config_of: str  #: the stopped deployment whose configuration comes back
    engine_config: endpoint_pb2.EngineConfig  #: that configuration
    deployment_id: str  #: the new deployment's id
    previous_id: str  #: the stable deployment it replaces
    message: str  #: its state message


@dataclass(frozen=True)
class AnnounceStarted:
    """Emit deploy.started (trigger API) for a deployment made by an earlier step."""

    deployment_id: str  #: the deployment


@dataclass(frozen=True)
class AnnounceRolledBack:
    """Emit deploy.rolled_back (trigger API)."""

    taken_out: str  #: the deployment that leaves service
    restored: str  #: the deployment that takes the traffic
    reason: str  #: the caller's reason


@dataclass(frozen=True)
class RollOut:
    """In the background: start the deployment, then move the traffic to it (`_roll_out`)."""

    deployment_id: str  #: the deployment


@dataclass(frozen=True)
class Locked:
    """`steps` under the endpoint's rollout lock (nothing else moves its traffic meanwhile)."""

    steps: tuple[Step, ...]  #: the steps, in order


Step = (
    Reroute
    | Mark
    | MarkEndpoint
    | StopEngines
    | Drain
    | EndRollout
    | CancelWork
    | TellCanary
    | Relaunch
    | AnnounceStarted
    | AnnounceRolledBack
    | RollOut
    | Locked
)

# -- a search winner ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WinnerVerdict:
    """Whether a search.completed rolls its winner out (before the store confirms it)."""

    engine: EngineSpec | None  #: the winner to roll out; None: nothing to do
    reason: str = ""  #: why not, one line for the log ("" when it rolls out)
    warning: bool = False  #: a refusal an operator should look at (logged as a warning)


def search_winner(
    event: events_pb2.Event,
    *,
    endpoint: endpoint_pb2.Endpoint,
    stable_engine: EngineSpec | None,
    now: datetime,
    max_age_s: float,
) -> WinnerVerdict:
    """A search's winner rolls out only under SEARCH_POLICY_AUTO, verified on the endpoint's own
    hardware class (a sim-* pool serves the performance model itself, so a modelled winner is as
    verified as it gets there), at most `max_age_s` old, and different from the stable
    configuration (a search that began before the last promotion can end with it)."""
    done = event.search_completed
    if done.outcome != events_pb2.SEARCH_OUTCOME_WINNER or not done.HasField("winner"):
        return WinnerVerdict(None, f"the search ended without a winner (outcome {done.outcome})")
    policy = endpoint.spec.search_policy
    if policy == D.SEARCH_POLICY_ADVISORY:
        return WinnerVerdict(
            None, f"policy advisory: trial {done.winner_trial_id} is for a person to promote"
        )
    if policy != D.SEARCH_POLICY_AUTO:
        return WinnerVerdict(None, "the endpoint's search policy is not auto")
    pool = endpoint.spec.hardware_pool.hardware_class
    if not done.verified and not pool.startswith("sim-"):
        return WinnerVerdict(None, "the winner was not verified on real hardware", warning=True)
    if done.winner_hardware_class and done.winner_hardware_class != pool:
        why = f"the winner was measured on {done.winner_hardware_class}, the endpoint serves on {pool}"
        return WinnerVerdict(None, why, warning=True)
    age_s = (now - event.time.ToDatetime(tzinfo=now.tzinfo)).total_seconds()
    if age_s > max_age_s:
        return WinnerVerdict(None, f"the event is {age_s:.0f} s old, over {max_age_s:g} s")
    engine = EngineSpec.from_proto(done.winner, default_model=endpoint.spec.model)
    if engine == stable_engine:
        return WinnerVerdict(None, "the winner is the stable configuration already")
    return WinnerVerdict(engine)


# -- an engine report -----------------------------------------------------------------------------


def engine_report_steps(report: EngineReport, *, stable_id: str, canary_here: str) -> list[Step]:
    """What a backend's report changes. `canary_here`: the canary whose loop this deployer runs.

    - exited: the deployment's message says why; the endpoint is DEGRADED if it was the stable.
    - restarted: the message clears; a stable one makes the endpoint READY again.
    - gave up on this deployer's canary: its loop hears it (and rolls it back).
    - gave up on any other: out of the traffic, FAILED, engines stopped; a stable one leaves the
      endpoint DEGRADED until someone promotes or rolls back.
    """
    deployment_id, detail = report.deployment_id, report.detail
    is_stable = deployment_id == stable_id
    if report.what == "exited":
        steps: list[Step] = [Mark(deployment_id, message=detail)]
        if is_stable:
            steps.append(MarkEndpoint(D.ENDPOINT_STATE_DEGRADED, f"{deployment_id}: {detail}"))
        return steps
    if report.what == "restarted":
        steps = [Mark(deployment_id, message="")]
        if is_stable:
            steps.append(MarkEndpoint(D.ENDPOINT_STATE_READY, ""))
        return steps
    if deployment_id == canary_here:
        return [TellCanary(f"the canary's engine failed: {detail}")]
    steps = [
        Reroute(Silence(deployment_id)),
        Mark(deployment_id, state=D.DEPLOYMENT_STATE_FAILED, message=detail),
        StopEngines(deployment_id),
    ]
    if is_stable:
        why = f"stable deployment {deployment_id} failed: {detail}; Promote or Rollback"
        steps.append(MarkEndpoint(D.ENDPOINT_STATE_DEGRADED, why))
    return steps


# -- a rollback -----------------------------------------------------------------------------------


def rollback_steps(
    chosen: RollbackPlan,
    *,
    stable_id: str,
    in_progress: endpoint_pb2.Deployment | None,
    restart: bool,
    result_id: str,
    reason: str,
) -> list[Step]:
    """The steps of a Rollback to `chosen.restore`, in three phases.

    1. A rollout in progress is aborted: its work cancelled, its deployment out of the traffic
       (drained when it took some, stopped at once otherwise), ROLLED_BACK. When the target is
       the stable deployment, that is all.
    2. A stopped target (`restart`) comes back as a new deployment `result_id` with its
       configuration, rolled out all at once.
    3. A target that still runs (it drains) takes all traffic back at once and is the stable one;
       every other serving deployment drains and ends ROLLED_BACK.

    Invariant: each deployment leaves service at most once (one Drain or StopEngines), and each
    one the plan takes out leaves: here, or, for the stable one when the target is relaunched, by
    the relaunched deployment's rollout (it drains the deployment it replaces).
    """
    restore = chosen.restore
    back_to_stable = restore.id == stable_id
    steps: list[Step] = []
    if in_progress is not None:
        steps += _abort(in_progress, back_to_stable=back_to_stable, stable_id=stable_id, reason=reason)
    if in_progress is not None and back_to_stable:
        steps.append(AnnounceRolledBack(taken_out=in_progress.id, restored=restore.id, reason=reason))
    elif restart:
        steps += _relaunch(restore, stable_id=stable_id, result_id=result_id, reason=reason)
    else:
        aborted = in_progress.id if in_progress is not None else ""
        leaving = [d for d in chosen.take_out if d != aborted]
        steps += _take_back(restore, stable_id=stable_id, leaving=leaving, reason=reason)
    leaves = [s.deployment_id for s in _flat(steps) if isinstance(s, Drain | StopEngines)]
    assert len(leaves) == len(set(leaves)), steps
    assert set(chosen.take_out) - {stable_id if restart else ""} <= set(leaves), steps
    return steps


def _abort(
    in_progress: endpoint_pb2.Deployment, *, back_to_stable: bool, stable_id: str, reason: str
) -> list[Step]:
    """Phase 1: the rollout in progress leaves service. The canary's share goes back to the
    stable, or, for another target, to nobody until phase 2 or 3 moves the traffic."""
    steps: list[Step] = [
        CancelWork(),
        Reroute(AllTo(stable_id) if back_to_stable else Silence(in_progress.id)),
    ]
    if in_progress.state == D.DEPLOYMENT_STATE_CANARY:  # its streams in flight finish, then it stops
        steps += [
            Mark(in_progress.id, message=reason),
            Drain(in_progress.id, final=D.DEPLOYMENT_STATE_ROLLED_BACK),
        ]
    else:
        steps += [
            StopEngines(in_progress.id),
            Reroute(Without(in_progress.id)),
            Mark(in_progress.id, state=D.DEPLOYMENT_STATE_ROLLED_BACK, message=reason),
        ]
    steps.append(EndRollout(in_progress.id))
    return steps


def _relaunch(restore: endpoint_pb2.Deployment, *, stable_id: str, result_id: str, reason: str) -> list[Step]:
    """Phase 2: a stopped target's configuration as a new deployment, rolled out at once."""
    steps: list[Step] = [
        Relaunch(
            config_of=restore.id,
            engine_config=restore.engine_config,
            deployment_id=result_id,
            previous_id=stable_id,
            message=reason or f"rollback to the configuration of {restore.id}",
        )
    ]
    if restore.state == D.DEPLOYMENT_STATE_DRAINING:  # its drain was cancelled: finish it
        steps.append(Drain(restore.id, final=D.DEPLOYMENT_STATE_RETIRED))
    steps += [
        AnnounceStarted(result_id),
        AnnounceRolledBack(taken_out=stable_id, restored=result_id, reason=reason),
        RollOut(result_id),
    ]
    return steps


def _take_back(
    restore: endpoint_pb2.Deployment, *, stable_id: str, leaving: list[str], reason: str
) -> list[Step]:
    """Phase 3: a target that still runs takes all traffic at once; `leaving` drain."""
    urls = [u for u in restore.upstream_url.split(",") if u]
    switch = (
        Reroute(AllTo(restore.id), urls={restore.id: urls}),
        Mark(restore.id, state=D.DEPLOYMENT_STATE_ACTIVE, message=""),
        MarkEndpoint(D.ENDPOINT_STATE_READY, "", stable_id=restore.id),
    )
    steps: list[Step] = [
        Locked(switch),
        AnnounceRolledBack(taken_out=stable_id, restored=restore.id, reason=reason),
    ]
    steps += [Drain(d, final=D.DEPLOYMENT_STATE_ROLLED_BACK) for d in leaving]
    return steps


def _flat(steps: list[Step]) -> list[Step]:
    """`steps` with each Locked group's steps in its place."""
    return [
        inner for step in steps for inner in (_flat(list(step.steps)) if isinstance(step, Locked) else [step])
    ]
