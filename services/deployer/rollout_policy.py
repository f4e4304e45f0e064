"""The rollout policy: how a canary rollout proceeds and how each step's analysis judges (pure).

`RolloutPolicy` declares every field's default and bounds, once. The rest derives from it:

- the deployer's settings nest it (`EVERTUNE_DEPLOYER_ROLLOUT__<FIELD>`, e.g.
  `EVERTUNE_DEPLOYER_ROLLOUT__STEP_DURATION_S`): the defaults of every endpoint;
- an endpoint's `spec.rollout` is its partial form `RolloutOverrides` (every field optional, the
  same bounds), and a rollout runs with `effective_policy(defaults, overrides)`, fixed in its KV
  record when it begins (a rollout in flight keeps it, a restarted deployer too);
- the wire's `RolloutPolicy` converts to and from `RolloutOverrides` in `validation.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator

from evertune.deployer.plan import FULL_WEIGHT


def step_plan_error(steps: tuple[int, ...]) -> str:
    """What is wrong with a plan of canary weights (basis points), or "" when nothing is."""
    if not steps:
        return "at least one step is needed"
    if any(not 0 < s <= FULL_WEIGHT for s in steps):
        return f"each weight must be in 1..{FULL_WEIGHT} basis points, got {list(steps)}"
    if list(steps) != sorted(set(steps)) or steps[-1] != FULL_WEIGHT:
        return f"must strictly increase and end at {FULL_WEIGHT} (100%), got {list(steps)}"
    return ""


def _checked_plan(steps: tuple[int, ...] | None) -> tuple[int, ...] | None:
    problem = "" if steps is None else step_plan_error(steps)
    if problem:
        raise ValueError(problem)
    return steps


#: Canary weights in basis points, strictly increasing, the last FULL_WEIGHT.
StepPlan = Annotated[tuple[int, ...], AfterValidator(_checked_plan)]

#: Field names of the release before this one (a rollout record written then holds them).
_PREVIOUS_NAMES: Final = {"failure_limit": "failures_tolerated"}


class RolloutPolicy(BaseModel):
    """How a rollout proceeds and what each step's analysis allows (defaults: 10% → 50% → 100%,
    a minute a step). The checks themselves are `canary.analyse`'s."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    #: canary weights in basis points, strictly increasing, the last one 10000 (100%)
    steps: StepPlan = (1000, 5000, FULL_WEIGHT)
    #: seconds of traffic at a step before it is analysed (at most a day)
    step_duration_s: float = Field(default=60.0, gt=0, le=86_400)
    #: analyses that may HOLD (too few requests) at one step before the rollout rolls back
    max_holds: int = Field(default=5, ge=0)
    #: failed analyses tolerated (analysed again at the same weight) before rolling back;
    #: 0 = the first failed analysis rolls back (the wire's failure_limit is this plus one)
    failures_tolerated: int = Field(default=0, ge=0, le=99)
    #: requests each arm must have served in a step before it is judged
    min_requests: int = Field(default=30, ge=1, le=10_000_000)
    #: canary requests from which the TTFT tail check uses p99 (below: p90)
    tail_min_requests: int = Field(default=200, ge=1, le=10_000_000)
    #: allowed relative TTFT regression of p50 and of the tail (0.10 = 10% slower)
    max_ttft_regression: float = Field(default=0.10, ge=0)
    #: and allowed absolute TTFT regression, in ms (a regression must exceed both to fail)
    ttft_slack_ms: float = Field(default=5.0, ge=0)
    #: allowed relative regression of the p99 inter-token gap
    max_itl_regression: float = Field(default=0.20, ge=0)
    #: and allowed absolute inter-token regression, in ms
    itl_slack_ms: float = Field(default=2.0, ge=0)
    #: allowed increase of the error share (absolute, 0.01 = one percentage point)
    max_error_share_increase: float = Field(default=0.01, ge=0, le=1)
    #: significance of the one-sided Mann-Whitney U test a regression must also pass
    p_value: float = Field(default=0.01, gt=0, lt=1)

    @model_validator(mode="before")
    @classmethod
    def _previous_record(cls, data: Any) -> Any:
        """A rollout record of the previous release: the canary's thresholds nested under
        "canary", and "failure_limit" for `failures_tolerated`."""
        if not isinstance(data, dict) or not ({"canary", *_PREVIOUS_NAMES} & data.keys()):
            return data
        flat = {_PREVIOUS_NAMES.get(k, k): v for k, v in data.items() if k != "canary"}
        return {**flat, **(data.get("canary") or {})}


class _Overrides(BaseModel):
    """The base of a policy's partial form: every field None unless set."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @property
    def empty(self) -> bool:
        """True when every field is left to the defaults."""
        return not self.set_fields()

    def set_fields(self) -> dict[str, Any]:
        """The fields that are set, by name."""
        return {k: v for k, v in self if v is not None}

    if TYPE_CHECKING:  # the fields are the policy's, each optional (made by `_partial`)

        def __init__(self, **fields: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...


def _partial(model: type[BaseModel]) -> type[_Overrides]:
    """`model` with every field optional (default None), its bounds and checks kept."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation: Any = info.annotation
        fields[name] = (Annotated[annotation | None, *info.metadata], None)
    return create_model(
        model.__name__.removesuffix("Policy") + "Overrides",
        __base__=_Overrides,
        __module__=__name__,
        __doc__=f"{model.__name__}, every field optional (None: the defaults').",
        **fields,
    )


if TYPE_CHECKING:
    RolloutOverrides = _Overrides
else:
    RolloutOverrides = _partial(RolloutPolicy)


def effective_policy(defaults: RolloutPolicy, overrides: RolloutOverrides) -> RolloutPolicy:
    """The policy a rollout of an endpoint runs with: its `overrides` where set, else `defaults`
    (the deployer's settings). Pure."""
    return defaults.model_copy(update=overrides.set_fields())
