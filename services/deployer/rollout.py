"""The progressive rollout of one canary deployment, as a pure state machine (no I/O, no clock).

    STARTING --ready--> CANARY(step 0) --proceed--> CANARY(step 1) ... --proceed at last--> PROMOTED
        |                  |  hold: stay (at most `max_holds` analyses per step, then roll back)
        +--failure---------+--> ROLLED_BACK (failed analyses over `failures_tolerated`, breach, failure)

The deployer's shell feeds it events (`ready`, `on_analysis`, `on_breach`, `on_failure`) and carries
out the `Action` each returns: set the canary's route weight, promote it, or roll it back. Weights
are basis points of the endpoint's traffic (the route table sums to 10000).

The policy of a rollout (`rollout_policy.py`) is the endpoint's overrides over the deployer's
defaults, computed once when the rollout begins and kept in its KV record: a rollout in flight keeps
the policy it started with (a restarted deployer too); an UpdateEndpoint changes the next rollout.

Invariants (asserted): the canary's weight never decreases except to 0 on a roll back; PROMOTED and
ROLLED_BACK are final (any later event answers `none`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from evertune.deployer.canary import Analysis, Verdict
from evertune.deployer.plan import FULL_WEIGHT
from evertune.deployer.rollout_policy import RolloutPolicy


class Phase(Enum):
    """Where the rollout is."""

    STARTING = "starting"  #: the canary engine is starting or warming up; no traffic
    CANARY = "canary"  #: the canary takes `weight` of the traffic
    PROMOTED = "promoted"  #: the canary is the stable deployment (final)
    ROLLED_BACK = "rolled_back"  #: the canary was taken out (final)


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
            if self.failures > self.policy.failures_tolerated:
                return self._roll_back(Trigger.CANARY_ANALYSIS, analysis.reason)
            return self._act(
                ActionKind.HOLD,
                f"failure {self.failures} of {self.policy.failures_tolerated} allowed: {analysis.reason}",
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
