"""A trial job as the runner uses it: the wire `TrialJob` checked once and turned into a `TrialPlan` (pure).

What the runner adds to the job, so the searcher need not:
- the rates replayed are the job's, plus its target rate (headline figures) and the gate rate
  (target x headroom, where the "slo" and "stability" gates are checked), ascending, without
  repeats; the headroom is the job's `slo_headroom`, or the runner's setting (1.25) when the job
  leaves it at 0 (`gate_rate`);
- with a "stability" gate the runner replays each rate at least twice (it compares repeats);
- a job whose target rate is 0 reports its headline figures, and checks its gates, at its highest rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from google.protobuf.message import DecodeError

from evertune.domain.engines import EngineSpec, engine_type
from evertune.domain.slo import Slo
from evertune.errors import InvalidArgument
from evertune.infra.bus import PoisonMessage
from evertune.infra.events import endpoint_token
from evertune.v1 import endpoint_pb2, jobs_pb2

#: Gates the runner knows (GateSpec.name); "reliability" is the brief's name of "stability".
KNOWN_GATES: frozenset[str] = frozenset({"correctness", "slo", "stability"})
#: Seconds each rate is replayed when the job leaves `duration_per_rate` unset.
DEFAULT_DURATION_S = 60.0
#: Largest `slo_headroom` a job may ask for (the runner setting's bound too).
MAX_HEADROOM = 10.0


class InvalidJob(InvalidArgument):
    """A decodable job that cannot be run as it is (no rates, a bad engine config, ...)."""


@dataclass(frozen=True)
class GatePlan:
    """One gate the job asks for."""

    name: str  #: "correctness", "slo" or "stability"
    threshold: float  #: the job's threshold in the gate's unit; 0 = the gate's default
    reference_uri: str  #: where the gate's reference lives ("trial:<trial id>"); "" = none


@dataclass(frozen=True)
class TrialPlan:
    """Everything a trial needs from its job, validated."""

    job_id: str  #: job id (Nats-Msg-Id of the job; one stored result per job id)
    trial_id: str  #: trial id, reported in every event
    search_id: str  #: search it belongs to ("" for a trial submitted by hand)
    endpoint: str  #: endpoint name (a valid subject token)
    profile_id: str  #: profile the trace was cut from ("" = none)
    hardware_class: str  #: hardware class the job was sent to
    config: endpoint_pb2.EngineConfig  #: candidate engine config as sent
    trace_uri: str  #: replayable trace ("voice:..." or "file:///...")
    trace_sha256: str  #: expected SHA-256 of a trace file ("" = not checked)
    rates_rps: tuple[float, ...]  #: rates to replay, ascending, gate and target rates included
    target_rate_rps: float  #: rate of the headline figures
    gate_rate_rps: float  #: rate the "slo" and "stability" gates are checked at
    slo_headroom: float  #: gate rate / target rate as applied (1.0 when the target is the highest rate)
    duration_s: float  #: seconds each rate is replayed, per repeat
    warmup_s: float  #: seconds of unmeasured traffic before each rate (0 = none)
    repeats: int  #: measured replays of each rate
    seed: int  #: seed of the replay's randomness
    slo: Slo  #: targets of attainment and goodput (ttft = Slo.ttft_p99_ms, itl = Slo.itl_p99_ms)
    ttft_p50_target_ms: float  #: the SLO's median TTFT target, ms (0 = none)
    gates: tuple[GatePlan, ...]  #: gates, in the job's order
    deadline: datetime | None  #: latest time to report (UTC); None = no deadline
    baseline: bool  #: the endpoint's current config: its golden outputs become the reference
    #: the search already holds this configuration's golden answers (a confirmation repeat)
    skip_golden: bool = False

    def gate(self, name: str) -> GatePlan | None:
        """The job's gate of that name, if it asks for it."""
        return next((g for g in self.gates if g.name == name), None)

    @property
    def needs_golden(self) -> bool:
        """Golden outputs are collected for the correctness gate, and for a baseline unless the
        search already holds them (`skip_golden`)."""
        if self.skip_golden:
            return False
        return self.baseline or self.gate("correctness") is not None


def decode_job(data: bytes) -> jobs_pb2.TrialJob:
    """The job in a message; undecodable or id-less data can never run: `PoisonMessage`."""
    try:
        job = jobs_pb2.TrialJob.FromString(data)
    except DecodeError as err:
        raise PoisonMessage(f"undecodable TrialJob: {err}") from None
    if not job.job_id or not job.trial_id:
        raise PoisonMessage("TrialJob without job_id or trial_id")
    try:
        endpoint_token(job.endpoint)
    except InvalidArgument as err:
        raise PoisonMessage(f"TrialJob {job.job_id}: {err}") from None
    if not job.endpoint:
        raise PoisonMessage(f"TrialJob {job.job_id} names no endpoint (trial events need one)")
    return job


def _same_rate(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def effective_rates(rates: list[float], *, extra: list[float]) -> tuple[float, ...]:
    """`rates` and `extra`, ascending, each once (rates within a millionth are one)."""
    out: list[float] = []
    for rate in sorted([*rates, *extra]):
        if not out or not _same_rate(out[-1], rate):
            out.append(rate)
    return tuple(out)


def slo_of(slo: endpoint_pb2.Slo) -> tuple[Slo, float]:
    """The `Slo` of a job's endpoint SLO (`InvalidJob` naming a value no SLO can have), and its
    p50 target."""
    try:
        rule = Slo.from_proto(slo)
    except InvalidArgument as err:
        raise InvalidJob(f"the job's SLO: {err}") from None
    return rule, rule.ttft_p50_ms


def gate_rate(
    *, target_rps: float, rates_rps: list[float], job_headroom: float, default_headroom: float
) -> tuple[float, float]:
    """(gate rate, headroom applied) of a job whose rates are already checked.

    The gate rate is the target (the profile's peak) x the job's `slo_headroom`, or x
    `default_headroom` (the runner's setting) when the job leaves it at 0. A target of 0 means the
    highest of `rates_rps`, with no headroom (1.0). A headroom below 1 or above `MAX_HEADROOM`
    raises `InvalidJob`.
    """
    if job_headroom != 0 and not (1.0 <= job_headroom <= MAX_HEADROOM):
        raise InvalidJob(
            f"slo_headroom must be 0 (the default) or within 1..{MAX_HEADROOM:g}, not {job_headroom:g}"
        )
    if target_rps == 0:
        return max(rates_rps), 1.0
    headroom = job_headroom or default_headroom
    return target_rps * headroom, headroom


def plan_trial(job: jobs_pb2.TrialJob, *, slo_headroom: float) -> TrialPlan:
    """The validated plan of a decoded job; a job that cannot run raises `InvalidJob` (one line).

    `slo_headroom` is the runner's default headroom, used when the job's `slo_headroom` is 0.
    """
    rates = list(job.rates_rps)
    if any(not (r > 0 and math.isfinite(r)) for r in rates):
        raise InvalidJob("every rate in rates_rps must be a positive number of requests per second")
    target = job.target_rate_rps
    if target < 0 or not math.isfinite(target):
        raise InvalidJob("target_rate_rps must be >= 0")
    if not rates and target == 0:
        raise InvalidJob("the job names no rate (rates_rps and target_rate_rps are empty)")
    gate_rate_rps, headroom = gate_rate(
        target_rps=target, rates_rps=rates, job_headroom=job.slo_headroom, default_headroom=slo_headroom
    )
    if target == 0:
        target = max(rates)
    gates: list[GatePlan] = []
    for spec in job.gates:
        name = "stability" if spec.name == "reliability" else spec.name
        if name not in KNOWN_GATES:
            raise InvalidJob(
                f"unknown gate {spec.name!r}; this runner knows {', '.join(sorted(KNOWN_GATES))}"
            )
        if spec.threshold < 0 or not math.isfinite(spec.threshold):
            raise InvalidJob(f"gate {name}: threshold must be >= 0")
        gates.append(GatePlan(name=name, threshold=spec.threshold, reference_uri=spec.reference_uri))
    if job.skip_golden and any(g.name == "correctness" for g in gates):
        raise InvalidJob("skip_golden with a correctness gate: the gate compares golden answers")
    slo, p50_target = slo_of(job.slo)
    duration = (
        job.duration_per_rate.ToTimedelta().total_seconds() if job.HasField("duration_per_rate") else 0.0
    )
    warmup = job.warmup.ToTimedelta().total_seconds() if job.HasField("warmup") else 0.0
    if duration < 0 or warmup < 0:
        raise InvalidJob("duration_per_rate and warmup must not be negative")
    repeats = max(job.repeats, 1)
    if any(g.name == "stability" for g in gates):
        repeats = max(repeats, 2)
    deadline = None
    if job.HasField("deadline"):
        deadline = job.deadline.ToDatetime(tzinfo=UTC)
    if not job.trace_uri:
        raise InvalidJob("the job names no trace (trace_uri)")
    return TrialPlan(
        job_id=job.job_id,
        trial_id=job.trial_id,
        search_id=job.search_id,
        endpoint=job.endpoint,
        profile_id=job.profile_id,
        hardware_class=job.hardware_class,
        config=job.engine_config,
        trace_uri=job.trace_uri,
        trace_sha256=job.trace_sha256.lower(),
        rates_rps=effective_rates(rates, extra=[target, gate_rate_rps]),
        target_rate_rps=target,
        gate_rate_rps=gate_rate_rps,
        slo_headroom=headroom,
        duration_s=duration or DEFAULT_DURATION_S,
        warmup_s=warmup,
        repeats=repeats,
        seed=job.seed,
        slo=slo,
        ttft_p50_target_ms=p50_target,
        gates=tuple(gates),
        deadline=deadline,
        baseline=job.baseline,
        skip_golden=job.skip_golden,
    )


def engine_spec(
    plan: TrialPlan, *, default_model: str, simulated: bool, cpu_default_kv_gib: float, cpu: bool
) -> EngineSpec:
    """The spec the runner starts: the job's config, with the runner's defaults where it is silent.

    An empty model is the runner's local model; a `sim-*` runner runs kind "sim"; a CPU engine
    that takes a KV cache size (vLLM) and has none gets `cpu_default_kv_gib` (0 keeps vLLM's
    default; llama.cpp sizes its KV cache by context instead). Raises
    `InvalidEngineConfig` (one line) for a config that is malformed.
    """
    spec = EngineSpec.from_proto(plan.config, default_model=default_model)
    update: dict[str, object] = {}
    if simulated:
        update["kind"] = "sim"
    takes_kv_space = "kv_cache_space_gib" in engine_type(spec.kind).knobs
    if (
        cpu
        and not simulated
        and takes_kv_space
        and spec.kv_cache_space_gib is None
        and cpu_default_kv_gib > 0
    ):
        update["kv_cache_space_gib"] = cpu_default_kv_gib
    return spec.model_copy(update=update) if update else spec
