"""A day, scripted: the scenario file format of `evertune bench day` (issue 38), read and checked.

A scenario is a TOML file (`scenarios/*.toml` beside this module ship as package data):

    name = "voice-day"
    seed = 7
    day_hours = 24            # the day-time a run covers
    wall_minutes = 60         # the wall time it is compressed into (one factor for every duration)
    quick_wall_minutes = 30   # the same day under `--quick`

    [load]                    # the request rate as a multiple of each endpoint's launch peak
    curve = [[0, 0.3], [7, 0.3], [12, 1.3], [18, 0.8], [24, 0.3]]   # (hour, multiple), linear between

    [[endpoints]]
    name = "voice"
    tenant = "acme"
    model = "smollm2-135m"    # a model evertune makes here: tiny, small, smollm2-135m
    engine = "vllm"           # or "sim" (the performance model)
    hardware = "cpu"          # the runner pool's hardware class
    peak_calls_per_s = 0.5    # the launch peak (`load.curve` multiplies it)
    slo = { ttft_p99_ms = 800, ttft_p50_ms = 300 }
    workload = { agents = 4 } # any other VoiceWorkload setting

    [[changes]]               # what changes, when (day-time "HH:MM")
    at = "09:00"
    endpoint = "voice"
    kind = "persona_joins"    # a persona with a `factor` times longer system prompt takes `share`
    share = 0.3
    factor = 4

    [[faults]]
    at = "10:30"
    kind = "nats_restart"     # a NATS node killed, restarted after `down_s` day-seconds
    down_s = 60

Changes: `persona_joins` (share, factor), `longer_answers` (factor on the answers' `max_tokens`),
`cold_callers` (share of calls with no shared prefix), `model_update` (model: the endpoint moved to
another checkpoint through the deployer's API), `hardware_move` (hardware: the runner pool moves to
another class or core set). Faults: `nats_restart` (down_s), `runner_killed` (mid-trial),
`deployer_restarted` (mid-canary), `store_unavailable` (down_s). Every error is one line naming the
file and the setting (`ScenarioError`). Pure: reading a file is the only I/O (`load_scenario`).
"""

from __future__ import annotations

import itertools
import re
import tomllib
from collections.abc import Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evertune.domain.model import Size
from evertune.domain.workloads import VoiceWorkload, WorkloadError
from evertune.errors import InvalidArgument

#: Seconds in an hour of day-time.
HOUR_S = 3600.0
_CLOCK = re.compile(r"^([01]\d|2[0-4]):([0-5]\d)$")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")


class ScenarioError(InvalidArgument):
    """A scenario file cannot be read or is not a valid day: the file and the setting, in one line."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Slo(_Strict):
    """The endpoint's SLO, in milliseconds of time to first token."""

    ttft_p99_ms: float = Field(default=800.0, gt=0.0, allow_inf_nan=False)  #: 99th percentile
    ttft_p50_ms: float = Field(default=300.0, gt=0.0, allow_inf_nan=False)  #: median


class Endpoint(_Strict):
    """One endpoint of the day, as it launches."""

    name: str  #: the endpoint's name (lower-case letters, digits and dashes)
    tenant: str  #: the tenant that owns it (same rule)
    model: Size  #: the checkpoint it launches with
    engine: Literal["vllm", "sim"] = "vllm"  #: real vLLM-CPU, or the performance model
    hardware: str = "cpu"  #: the hardware class its runner pool serves at launch
    peak_calls_per_s: float = Field(gt=0.0, allow_inf_nan=False)  #: calls/s at the launch peak
    slo: Slo = Slo()  #: its SLO
    #: Any other VoiceWorkload setting of its callers (the curve and the peak come from the day)
    workload: dict[str, object] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names_and_workload(self) -> Self:
        for what, value in (("name", self.name), ("tenant", self.tenant)):
            if not _NAME.match(value):
                raise ValueError(f"{what} {value!r}: lower-case letters, digits and dashes, 1-40")
        if (self.engine == "sim") != self.hardware.startswith("sim-"):
            raise ValueError(f"engine {self.engine} cannot run on {self.hardware}: sim runs on sim-<class>")
        for owned in ("curve", "peak_calls_per_s", "seed", "duration_s"):
            if owned in self.workload:
                raise ValueError(f"workload.{owned} is the day's to set, not the endpoint's")
        try:
            VoiceWorkload.parse(self.workload)
        except WorkloadError as err:
            raise ValueError(str(err)) from None
        return self


class Load(_Strict):
    """The request rate over the day as a multiple of each endpoint's launch peak."""

    #: (hour, multiple) points from hour 0 to the day's end, hours rising, linear between
    curve: list[tuple[float, float]] = Field(min_length=2)

    @model_validator(mode="after")
    def _hours_rise(self) -> Self:
        hours = [hour for hour, _ in self.curve]
        if hours[0] != 0 or any(b <= a for a, b in itertools.pairwise(hours)):
            raise ValueError(f"hours must start at 0 and rise, got {hours}")
        if any(not 0 <= multiple <= 10 for _, multiple in self.curve):
            raise ValueError("multiples must be between 0 and 10")
        return self

    def multiple(self, hour: float) -> float:
        """The rate at `hour` of day as a multiple of the launch peak (the last point holds after it)."""
        points = self.curve
        if hour >= points[-1][0]:
            return points[-1][1]
        for (h0, m0), (h1, m1) in itertools.pairwise(points):
            if h0 <= hour < h1:
                return m0 + (m1 - m0) * (hour - h0) / (h1 - h0)
        return points[0][1]  # before hour 0


class _Timed(_Strict):
    at: str  #: day-time "HH:MM"

    @property
    def at_s(self) -> float:
        """Seconds of day-time from the day's start."""
        match = _CLOCK.match(self.at)
        assert match is not None  # checked by `_clock`
        return int(match[1]) * HOUR_S + int(match[2]) * 60.0

    @model_validator(mode="after")
    def _clock(self) -> Self:
        if not _CLOCK.match(self.at):
            raise ValueError(f"at {self.at!r}: a day-time HH:MM")
        return self


class PersonaJoins(_Timed):
    """A persona with a `factor` times longer system prompt takes `share` of the endpoint's calls."""

    kind: Literal["persona_joins"]
    endpoint: str  #: the endpoint it joins
    share: float = Field(gt=0.0, le=1.0)  #: share of the calls from then on
    factor: float = Field(gt=1.0, le=20.0)  #: its system prompt's length over the others'


class LongerAnswers(_Timed):
    """The answers asked for grow: every call's `max_tokens` range times `factor`."""

    kind: Literal["longer_answers"]
    endpoint: str  #: the endpoint whose callers change
    factor: float = Field(gt=1.0, le=20.0)  #: on both ends of `max_tokens`


class ColdCallers(_Timed):
    """A share of the calls comes with no prefix shared with any other call."""

    kind: Literal["cold_callers"]
    endpoint: str  #: the endpoint they call
    share: float = Field(gt=0.0, le=1.0)  #: share of the calls from then on


class ModelUpdate(_Timed):
    """The endpoint moves to another checkpoint, through the deployer's API."""

    kind: Literal["model_update"]
    endpoint: str  #: the endpoint updated
    model: Size  #: its new checkpoint


class HardwareMove(_Timed):
    """The endpoint's runner pool moves to another hardware class (another fingerprint)."""

    kind: Literal["hardware_move"]
    endpoint: str  #: the endpoint whose pool moves
    hardware: str  #: the class it moves to (a named class, or "cpu-<n>" for n cores of this machine)


Change = Annotated[
    PersonaJoins | LongerAnswers | ColdCallers | ModelUpdate | HardwareMove, Field(discriminator="kind")
]


class NatsRestart(_Timed):
    """A NATS node is killed and restarted `down_s` day-seconds later."""

    kind: Literal["nats_restart"]
    down_s: float = Field(gt=0.0, le=HOUR_S)  #: day-seconds it is down


class RunnerKilled(_Timed):
    """A runner is killed in the middle of a trial (the first trial running at or after `at`)."""

    kind: Literal["runner_killed"]


class DeployerRestarted(_Timed):
    """The deployer is restarted in the middle of a canary (the first rollout at or after `at`)."""

    kind: Literal["deployer_restarted"]


class StoreUnavailable(_Timed):
    """The telemetry sink's store refuses writes for `down_s` day-seconds."""

    kind: Literal["store_unavailable"]
    down_s: float = Field(gt=0.0, le=HOUR_S)  #: day-seconds it is away


Fault = Annotated[
    NatsRestart | RunnerKilled | DeployerRestarted | StoreUnavailable, Field(discriminator="kind")
]


class Scenario(_Strict):
    """A day: its endpoints, its load, what changes and what breaks, and its time compression."""

    name: str  #: the scenario's name
    description: str = ""  #: what the day is, in a sentence
    seed: int = Field(default=0, ge=0)  #: seed of the traffic (the same seed replays the same day)
    day_hours: float = Field(default=24.0, gt=0.0, le=24.0)  #: day-time the run covers
    wall_minutes: float = Field(gt=0.0, le=24 * 60)  #: wall time it is compressed into
    quick_wall_minutes: float | None = Field(default=None, gt=0.0)  #: the same under `--quick`
    load: Load  #: the rate over the day
    endpoints: list[Endpoint] = Field(min_length=1)  #: the endpoints at launch
    changes: list[Change] = Field(default_factory=list)  #: what changes, when
    faults: list[Fault] = Field(default_factory=list)  #: what breaks, when

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        names = [e.name for e in self.endpoints]
        if len(set(names)) != len(names):
            raise ValueError(f"endpoint names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")
        if self.load.curve[-1][0] < self.day_hours:
            raise ValueError(f"load.curve ends at hour {self.load.curve[-1][0]}, before the day's end")
        for index, change in enumerate(self.changes):
            if change.endpoint not in names:
                raise ValueError(
                    f"changes.{index}: no endpoint {change.endpoint!r} (known: {', '.join(names)})"
                )
        for what, timed in (("changes", self.changes), ("faults", self.faults)):
            for index, event in enumerate(timed):
                if event.at_s >= self.day_hours * HOUR_S:
                    raise ValueError(f"{what}.{index}: at {event.at} is past the day's {self.day_hours:g} h")
        return self

    def compression(self, *, quick: bool = False) -> float:
        """Day-seconds per wall-second: one factor for every duration of the scenario and of
        evertune's own timers in the run."""
        minutes = self.quick_wall_minutes if quick and self.quick_wall_minutes else self.wall_minutes
        return self.day_hours * HOUR_S / (minutes * 60.0)

    def timeline(self) -> list[tuple[float, Change | Fault]]:
        """Every change and fault with its day-second, in time order (changes before faults at one time)."""
        events: list[tuple[float, int, Change | Fault]] = [(c.at_s, 0, c) for c in self.changes]
        events += [(f.at_s, 1, f) for f in self.faults]
        return [(at, event) for at, _, event in sorted(events, key=lambda e: (e[0], e[1]))]


def parse_scenario(data: Mapping[str, object], *, source: str) -> Scenario:
    """A scenario from parsed TOML; a bad one raises a one-line `ScenarioError` naming `source`."""
    try:
        return Scenario.model_validate(dict(data))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"] if not _is_tag(part))
        reason = str(first["msg"]).removeprefix("Value error, ")
        raise ScenarioError(f"scenario {source}: {where + ': ' if where else ''}{reason}") from None


def _is_tag(part: object) -> bool:
    """A discriminated union's tag in an error location ("persona_joins"), not a setting."""
    return isinstance(part, str) and part in _KINDS


_KINDS = {
    "persona_joins", "longer_answers", "cold_callers", "model_update", "hardware_move",
    "nats_restart", "runner_killed", "deployer_restarted", "store_unavailable",
}  # fmt: skip


def load_scenario(path: Path) -> Scenario:
    """Read and check the scenario file at `path` (one-line `ScenarioError` when it is not one)."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise ScenarioError(f"scenario {path}: cannot read it: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"scenario {path}: not TOML: {err}") from None
    return parse_scenario(data, source=str(path))


def shipped(name: str) -> Scenario:
    """A scenario shipped with evertune (`voice-day`, `fleet-day`), read from the package data."""
    found = files("evertune.apps.day") / "scenarios" / f"{name}.toml"
    if not found.is_file():
        raise ScenarioError(f"no shipped scenario {name!r} (shipped: {', '.join(shipped_names())})")
    return parse_scenario(tomllib.loads(found.read_text()), source=f"{name}.toml")


def shipped_names() -> Sequence[str]:
    """The names of the scenarios shipped with evertune."""
    folder = files("evertune.apps.day") / "scenarios"
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))
