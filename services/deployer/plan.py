"""The deployer's decisions (pure): route tables, rollback targets, restarts, what to resume.

No I/O and no clock: callers pass `now`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from evertune.errors import FailedPrecondition, NotFound
from evertune.v1 import endpoint_pb2

#: Total route weight the deployer writes (basis points).
FULL_WEIGHT: Final = 10_000

D = endpoint_pb2  # short alias for the enum values below

#: Deployments that run (or are about to) and so hold engines.
LIVE_STATES: Final = frozenset(
    {
        D.DEPLOYMENT_STATE_PENDING,
        D.DEPLOYMENT_STATE_STARTING,
        D.DEPLOYMENT_STATE_CANARY,
        D.DEPLOYMENT_STATE_ACTIVE,
        D.DEPLOYMENT_STATE_DRAINING,
    }
)
#: Deployments that are done (ListDeployments hides them unless include_stopped).
STOPPED_STATES: Final = frozenset(
    {D.DEPLOYMENT_STATE_RETIRED, D.DEPLOYMENT_STATE_ROLLED_BACK, D.DEPLOYMENT_STATE_FAILED}
)
#: Deployments of a rollout in progress.
ROLLOUT_STATES: Final = frozenset(
    {D.DEPLOYMENT_STATE_PENDING, D.DEPLOYMENT_STATE_STARTING, D.DEPLOYMENT_STATE_CANARY}
)


def route_table(
    endpoint: str,
    weights: Mapping[str, int],
    urls: Mapping[str, Sequence[str]],
    *,
    revision: int,
    now: datetime,
    tenant: str,
    endpoint_uid: str = "",
    model: str = "",
) -> endpoint_pb2.RouteTable:
    """The gateway's table: one Route per replica URL; a deployment's weight split over its
    replicas (the remainder to the first). Deployments without URLs are left out; a weight of 0
    keeps the deployment listed (in-flight requests finish) but sends it nothing new. `tenant`
    owns the endpoint (a gateway with API keys serves it to that tenant's keys only);
    `endpoint_uid` is its immutable id (the gateway stamps it on telemetry); `model` the model it
    serves (whose tokenizer the gateway counts prompts with)."""
    table = endpoint_pb2.RouteTable(
        endpoint=endpoint, revision=revision, tenant=tenant, endpoint_uid=endpoint_uid, model=model
    )
    table.update_time.FromDatetime(now)
    for deployment_id in sorted(weights):
        replicas = list(urls.get(deployment_id, ()))
        if not replicas:
            continue
        weight = weights[deployment_id]
        share, rest = divmod(weight, len(replicas))
        for i, url in enumerate(replicas):
            table.routes.append(
                endpoint_pb2.Route(
                    deployment_id=deployment_id, upstream_url=url, weight=share + (rest if i == 0 else 0)
                )
            )
    return table


def weights_of(table: endpoint_pb2.RouteTable) -> dict[str, int]:
    """Deployment -> total weight in a table."""
    out: dict[str, int] = {}
    for route in table.routes:
        out[route.deployment_id] = out.get(route.deployment_id, 0) + route.weight
    return out


def _checked(weights: dict[str, int], *, full: bool) -> dict[str, int]:
    """`weights`, after asserting each is within [0, FULL_WEIGHT] and their sum is FULL_WEIGHT
    (`full`) or at most that (a change that takes a deployment out of service)."""
    total = sum(weights.values())
    assert all(0 <= w <= FULL_WEIGHT for w in weights.values()), weights
    assert total == FULL_WEIGHT if full else total <= FULL_WEIGHT, weights
    return weights


class WeightChange:
    """A change of an endpoint's route weights: deployment -> weight now, to deployment -> weight
    next. Each kind is a frozen dataclass, so a decision that holds one compares equal in tests."""

    def __call__(self, now: Mapping[str, int]) -> dict[str, int]:
        raise NotImplementedError


@dataclass(frozen=True)
class AllTo(WeightChange):
    """All traffic to one deployment at once; every other listed one stays at 0 (it drains)."""

    deployment_id: str  #: the deployment that takes FULL_WEIGHT

    def __call__(self, now: Mapping[str, int]) -> dict[str, int]:
        return _checked({**dict.fromkeys(now, 0), self.deployment_id: FULL_WEIGHT}, full=True)


@dataclass(frozen=True)
class CanarySplit(WeightChange):
    """The canary at `canary_weight`, the stable at the rest, every other listed one at 0 (a
    canary weight of 0 is the way back to the stable)."""

    stable_id: str  #: the deployment compared with
    canary_id: str  #: the deployment rolling out
    canary_weight: int  #: its share, basis points of FULL_WEIGHT

    def __call__(self, now: Mapping[str, int]) -> dict[str, int]:
        weights = {
            **dict.fromkeys(now, 0),
            self.stable_id: FULL_WEIGHT - self.canary_weight,
            self.canary_id: self.canary_weight,
        }
        return _checked(weights, full=True)


@dataclass(frozen=True)
class Silence(WeightChange):
    """One deployment at 0, still listed (its requests in flight finish); the rest unchanged."""

    deployment_id: str  #: the deployment that gets no new requests

    def __call__(self, now: Mapping[str, int]) -> dict[str, int]:
        weights = dict(now)
        if self.deployment_id in weights:
            weights[self.deployment_id] = 0
        return _checked(weights, full=False)


@dataclass(frozen=True)
class SilenceAll(WeightChange):
    """Every deployment at 0 (an endpoint being deleted)."""

    def __call__(self, now: Mapping[str, int]) -> dict[str, int]:
        return dict.fromkeys(now, 0)


@dataclass(frozen=True)
class Without(WeightChange):
    """One deployment out of the table (it stopped); the rest unchanged."""

    deployment_id: str  #: the deployment taken out

    def __call__(self, now: Mapping[str, int]) -> dict[str, int]:
        return _checked({k: v for k, v in now.items() if k != self.deployment_id}, full=False)


@dataclass(frozen=True)
class Rejoin(WeightChange):
    """A restarted deployment back in the table: the weight it has there, else `weight`."""

    deployment_id: str  #: the deployment whose engines started again
    weight: int  #: its weight when the table does not list it (its record's)

    def __call__(self, now: Mapping[str, int]) -> dict[str, int]:
        return _checked({**now, self.deployment_id: now.get(self.deployment_id, self.weight)}, full=False)


def urls_of(table: endpoint_pb2.RouteTable) -> dict[str, list[str]]:
    """Deployment -> replica URLs in a table."""
    out: dict[str, list[str]] = {}
    for route in table.routes:
        out.setdefault(route.deployment_id, []).append(route.upstream_url)
    return out


def rollout_in_progress(deployments: Sequence[endpoint_pb2.Deployment]) -> endpoint_pb2.Deployment | None:
    """The deployment of an unfinished rollout, if any."""
    for deployment in deployments:
        if deployment.state in ROLLOUT_STATES:
            return deployment
    return None


@dataclass(frozen=True)
class RollbackPlan:
    """What a Rollback does."""

    restore: endpoint_pb2.Deployment  #: the deployment to serve at full weight
    restart: bool  #: it stopped: start a new deployment (origin ROLLBACK) with its engine config
    take_out: tuple[str, ...]  #: deployments that leave service (ROLLED_BACK)


def plan_rollback(
    *,
    stable_id: str,
    deployments: Sequence[endpoint_pb2.Deployment],
    to_deployment_id: str,
) -> RollbackPlan:
    """Choose the rollback target.

    - A rollout in progress: abort it, the stable deployment stays (or `to_deployment_id`).
    - Otherwise: `to_deployment_id`, else the stable's previous deployment. A target that is not
      running anymore is restarted (`restart`). Rolling back to the stable one itself, or with
      nothing before it, is FAILED_PRECONDITION; an unknown id is NOT_FOUND.
    """
    by_id = {d.id: d for d in deployments}
    in_progress = rollout_in_progress(deployments)
    stable = by_id.get(stable_id)
    if to_deployment_id:
        target = by_id.get(to_deployment_id)
        if target is None:
            raise NotFound(f"deployment {to_deployment_id} not found")
    elif in_progress is not None and stable is not None:
        target = stable
    else:
        previous = stable.previous_deployment_id if stable is not None else ""
        if not previous or previous not in by_id:
            raise FailedPrecondition("nothing to roll back to: the stable deployment has no predecessor")
        target = by_id[previous]
    if target.state in ROLLOUT_STATES:
        raise FailedPrecondition(
            f"deployment {target.id} is still rolling out; it cannot be a rollback target"
        )
    if target.id == stable_id and in_progress is None:
        raise FailedPrecondition(f"deployment {target.id} is already the stable deployment")
    leaving = ROLLOUT_STATES | {D.DEPLOYMENT_STATE_ACTIVE}
    take_out = tuple(d.id for d in deployments if d.id != target.id and d.state in leaving)
    return RollbackPlan(restore=target, restart=target.state in STOPPED_STATES, take_out=take_out)


ResumeAction = Literal["restart", "finish_start", "continue_canary", "finish_drain", "nothing"]


def resume_action(deployment: endpoint_pb2.Deployment, *, endpoint_state: int) -> ResumeAction:
    """What a deployer starting up does with a deployment it finds in KV (its engines, if it ran
    them locally, died with the previous deployer process).

    - ACTIVE: start it again ("restart"); the route table gets its new URLs.
    - PENDING / STARTING: carry on with the interim rollout ("finish_start").
    - CANARY: carry the canary on at the step its rollout record names: its engines start again,
      then the step's weight is set again and analysed over a fresh window ("continue_canary");
      a canary that cannot start again is rolled back (trigger FAILURE).
    - DRAINING: its traffic is gone; stop it ("finish_drain").
    - Anything of an endpoint being deleted: the deletion resumes instead ("nothing").
    """
    if endpoint_state == D.ENDPOINT_STATE_DELETING:
        return "nothing"
    if deployment.state == D.DEPLOYMENT_STATE_ACTIVE:
        return "restart"
    if deployment.state in (D.DEPLOYMENT_STATE_PENDING, D.DEPLOYMENT_STATE_STARTING):
        return "finish_start"
    if deployment.state == D.DEPLOYMENT_STATE_CANARY:
        return "continue_canary"
    if deployment.state == D.DEPLOYMENT_STATE_DRAINING:
        return "finish_drain"
    return "nothing"


@dataclass
class RestartBudget:
    """Restarts of one engine replica within a sliding window (the restart policy)."""

    max_restarts: int  #: restarts allowed within the window
    window_s: float  #: window length, seconds
    times: list[float] = field(default_factory=list)  #: monotonic times of past restarts

    def allow(self, now: float) -> bool:
        """Record a restart at `now` and say whether it is within budget."""
        self.times = [t for t in self.times if now - t < self.window_s]
        if len(self.times) >= self.max_restarts:
            return False
        self.times.append(now)
        return True

    @property
    def used(self) -> int:
        return len(self.times)


def drained(in_flight: int | None, *, waited_s: float, timeout_s: float) -> bool:
    """Whether a draining deployment can stop: nothing in flight, or the timeout ran out. An
    unknown in-flight count waits the whole timeout."""
    if waited_s >= timeout_s:
        return True
    return in_flight == 0
