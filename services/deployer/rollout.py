"""The progressive rollout of one canary deployment, as a pure state machine (no I/O, no clock).

    STARTING --ready--> CANARY(step 0) --proceed--> CANARY(step 1) ... --proceed at last--> PROMOTED
        |                  |  hold: stay (at most `max_holds` analyses per step, then roll back)
        +--failure---------+--> ROLLED_BACK (failed analyses over `failure_limit`, breach, failure)

The deployer's shell feeds it events (`ready`, `on_analysis`, `on_breach`, `on_failure`) and carries
out the `Action` each returns: set the canary's route weight, promote it, or roll it back. Weights
are basis points of the endpoint's traffic (the route table sums to 10000).

The policy of a rollout is `effective_policy(deployer defaults, the endpoint's RolloutOverrides)`,
computed once when the rollout begins and kept in its KV record: a rollout in flight keeps the
policy it started with (a restarted deployer too); an UpdateEndpoint changes the next rollout.

Invariants (asserted): the canary's weight never decreases except to 0 on a roll back; PROMOTED and
ROLLED_BACK are final (any later event answers `none`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from evertune.deployer.canary import Analysis, CanaryPolicy, Verdict
from pydantic import BaseModel, ConfigDict, Field, field_validator

FULL_WEIGHT = 10000


class Phase(Enum):
    """Where the rollout is."""

    STARTING = "starting"  #: the canary engine is starting or warming up; no traffic
    CANARY = "canary"  #: the canary takes `weight` of the traffic
    PROMOTED = "promoted"  #: the canary is the stable deployment (final)
    ROLLED_BACK = "rolled_back"  #: the canary was taken out (final)


class RolloutPolicy(BaseModel):
    """How a rollout proceeds (defaults: 10% → 50% → 100%)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: canary weights in basis points, increasing, the last one 10000 (100%)
    steps: tuple[int, ...] = (1000, 5000, FULL_WEIGHT)
    #: seconds of traffic at a step before it is analysed
    step_duration_s: float = Field(default=60.0, gt=0)
    #: analyses that may HOLD at one step before the rollout rolls back
    max_holds: int = Field(default=5, ge=0)
    #: failed analyses tolerated (re-analysed at the same weight) before rolling back; 0 = the first
    failure_limit: int = Field(default=0, ge=0)
    #: thresholds of each analysis
    canary: CanaryPolicy = CanaryPolicy()

    @field_validator("steps")
    @classmethod
    def _check_steps(cls, steps: tuple[int, ...]) -> tuple[int, ...]:
        problem = step_plan_error(steps)
        if problem:
            raise ValueError(f"steps: {problem}")
        return steps


def step_plan_error(steps: tuple[int, ...]) -> str:
    """What is wrong with a plan of canary weights (basis points), or "" when nothing is."""
    if not steps:
        return "at least one step is needed"
    if any(not 0 < s <= FULL_WEIGHT for s in steps):
        return f"each weight must be in 1..{FULL_WEIGHT} basis points, got {list(steps)}"
    if list(steps) != sorted(set(steps)):
        return f"weights must strictly increase and end at {FULL_WEIGHT}, got {list(steps)}"
    if steps[-1] != FULL_WEIGHT:
        return f"the last step must be {FULL_WEIGHT} (100%), got {steps[-1]}"
    return ""


class RolloutOverrides(BaseModel):
    """An endpoint's own rollout settings (the domain form of the wire's `RolloutPolicy`).

    None everywhere means "the deployer's default" (`DeployerSettings.rollout_policy()`);
    `effective_policy` merges the two.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: canary weights in basis points (RolloutPolicy.steps' rules)
    steps: tuple[int, ...] | None = None
    #: seconds of traffic at a step before it is analysed
    step_duration_s: float | None = Field(default=None, gt=0)
    #: failed analyses tolerated before rolling back (the wire's failure_limit minus one)
    failures_tolerated: int | None = Field(default=None, ge=0)
    #: requests each arm must have served in a step before it is judged
    min_requests: int | None = Field(default=None, ge=1)
    #: canary requests from which the TTFT tail check uses p99
    tail_min_requests: int | None = Field(default=None, ge=1)
    #: allowed relative TTFT regression
    max_ttft_regression: float | None = Field(default=None, ge=0)
    #: allowed absolute TTFT regression, ms
    ttft_slack_ms: float | None = Field(default=None, ge=0)
    #: allowed relative regression of the p99 inter-token gap
    max_itl_regression: float | None = Field(default=None, ge=0)
    #: allowed absolute inter-token regression, ms
    itl_slack_ms: float | None = Field(default=None, ge=0)
    #: allowed increase of the error share (absolute)
    max_error_share_increase: float | None = Field(default=None, ge=0, le=1)
    #: significance of the one-sided Mann-Whitney U test
    p_value: float | None = Field(default=None, gt=0, lt=1)

    @field_validator("steps")
    @classmethod
    def _check_steps(cls, steps: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if steps is not None:
            problem = step_plan_error(steps)
            if problem:
                raise ValueError(problem)
        return steps

    @property
    def empty(self) -> bool:
        """True when every field is left to the deployer."""
        return all(v is None for v in self.model_dump().values())


#: RolloutOverrides fields that are CanaryPolicy fields of the same name.
_CANARY_FIELDS = tuple(CanaryPolicy.model_fields)


def effective_policy(defaults: RolloutPolicy, overrides: RolloutOverrides) -> RolloutPolicy:
    """The policy a rollout of an endpoint runs with: its `overrides` where set, else `defaults`
    (the deployer's settings). `max_holds` is the deployer's alone. Pure."""
    canary = {f: getattr(overrides, f) for f in _CANARY_FIELDS if getattr(overrides, f) is not None}
    return RolloutPolicy(
        steps=overrides.steps if overrides.steps is not None else defaults.steps,
        step_duration_s=(
            overrides.step_duration_s if overrides.step_duration_s is not None else defaults.step_duration_s
        ),
        max_holds=defaults.max_holds,
        failure_limit=(
            overrides.failures_tolerated
            if overrides.failures_tolerated is not None
            else defaults.failure_limit
        ),
        canary=CanaryPolicy.model_validate({**defaults.canary.model_dump(), **canary}),
    )


class ActionKind(Enum):
    """What the shell must do."""

    NONE = "none"  #: nothing (e.g. an event after the rollout ended)
    SET_WEIGHT = "set_weight"  #: give the canary `weight` and wait a step
    HOLD = "hold"  #: keep the weight and analyse again after another step
    PROMOTE = "promote"  #: make the canary stable at full weight; drain the old one
    ROLL_BACK = "roll_back"  #: canary weight to 0, stable back to full, stop the canary


class Trigger(Enum):
    """Why a roll back happened (the wire's DeployTrigger)."""

    CANARY_ANALYSIS = "canary_analysis"
    BREACH = "breach"
    FAILURE = "failure"


@dataclass(frozen=True)
class Action:
    """One decision of the rollout."""

    kind: ActionKind  #: what to do
    weight: int  #: the canary's weight after it, in basis points
    step: int  #: step index it belongs to (0-based)
    reason: str = ""  #: one line for a person
    trigger: Trigger | None = None  #: for ROLL_BACK: why


class Rollout:
    """The rollout of one canary against the stable deployment; see the module docstring."""

    def __init__(self, policy: RolloutPolicy) -> None:
        self.policy = policy
        self.phase = Phase.STARTING
        self.step = 0  #: index into policy.steps
        self.weight = 0  #: canary weight now, basis points
        self.holds = 0  #: HOLD analyses at the current step
        self.failures = 0  #: failed analyses so far
        self.analyses: list[Analysis] = []  #: every analysis, in order

    @property
    def finished(self) -> bool:
        """True once promoted or rolled back."""
        return self.phase in (Phase.PROMOTED, Phase.ROLLED_BACK)

    def ready(self) -> Action:
        """The canary is up and warmed: give it the first step's weight."""
        if self.phase is not Phase.STARTING:
            return self._none("ready outside STARTING")
        self.phase = Phase.CANARY
        return self._set_weight(0, "canary ready")

    def resume(self, *, step: int, failures: int) -> Action:
        """Carry on a rollout a restarted deployer found at `step` (its canary is up again): back to
        that step's weight (the last step when the policy has fewer), with the failures so far."""
        if self.phase is not Phase.STARTING:
            return self._none("resume outside STARTING")
        self.phase = Phase.CANARY
        self.failures = failures
        return self._set_weight(max(0, min(step, len(self.policy.steps) - 1)), "resumed after a restart")

    def on_analysis(self, analysis: Analysis) -> Action:
        """The analysis of the current step came back."""
        if self.phase is not Phase.CANARY:
            return self._none(f"analysis while {self.phase.value}")
        self.analyses.append(analysis)
        if analysis.verdict is Verdict.HOLD:
            self.holds += 1
            if self.holds > self.policy.max_holds:
                return self._roll_back(
                    Trigger.CANARY_ANALYSIS, f"still undecided after {self.holds} analyses: {analysis.reason}"
                )
            return self._act(ActionKind.HOLD, analysis.reason)
        if analysis.verdict is Verdict.ROLL_BACK:
            self.failures += 1
            if self.failures > self.policy.failure_limit:
                return self._roll_back(Trigger.CANARY_ANALYSIS, analysis.reason)
            return self._act(
                ActionKind.HOLD,
                f"failure {self.failures} of {self.policy.failure_limit} allowed: {analysis.reason}",
            )
        if self.step + 1 < len(self.policy.steps):
            return self._set_weight(self.step + 1, analysis.reason)
        self.phase = Phase.PROMOTED
        return self._act(ActionKind.PROMOTE, "every step passed")

    def on_breach(self, breach_id: str) -> Action:
        """An SLA breach during the rollout: roll back at once."""
        if self.finished:
            return self._none("breach after the rollout ended")
        return self._roll_back(Trigger.BREACH, f"sla breach {breach_id} during the rollout")

    def on_failure(self, message: str) -> Action:
        """The canary failed to start or crashed."""
        if self.finished:
            return self._none("failure after the rollout ended")
        return self._roll_back(Trigger.FAILURE, message)

    # --- internals -------------------------------------------------------------------------------
    def _set_weight(self, step: int, reason: str) -> Action:
        weight = self.policy.steps[step]
        assert weight > self.weight, "a canary's weight only grows until a roll back"
        self.step, self.weight, self.holds = step, weight, 0
        return self._act(ActionKind.SET_WEIGHT, reason)

    def _roll_back(self, trigger: Trigger, reason: str) -> Action:
        self.phase = Phase.ROLLED_BACK
        self.weight = 0
        return Action(kind=ActionKind.ROLL_BACK, weight=0, step=self.step, reason=reason, trigger=trigger)

    def _act(self, kind: ActionKind, reason: str) -> Action:
        if kind is ActionKind.PROMOTE:
            self.weight = FULL_WEIGHT
        return Action(kind=kind, weight=self.weight, step=self.step, reason=reason)

    def _none(self, reason: str) -> Action:
        return Action(kind=ActionKind.NONE, weight=self.weight, step=self.step, reason=reason)
