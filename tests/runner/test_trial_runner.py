"""A whole trial against the stand-in engine: figures, gates, and every way a trial can fail."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from evertune.domain.engines import EngineSpec
from evertune.runner.trial_runner import Reference, TrialOutcome, TrialRunner, default_engine_factory
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2

from .helpers import fake_factory, job, settings


class Phases:
    """Records the progress callbacks."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, phase: events_pb2.TrialPhase, rate: float, done: int, total: int) -> None:
        self.seen.append(events_pb2.TrialPhase.Name(phase))


def runner(
    tmp_path: Path,
    *,
    behaviour: Callable[[EngineSpec], list[str]] = lambda spec: [],
    references: dict[str, Reference] | None = None,
    model_dir: Path | None = None,
    **overrides: object,
) -> TrialRunner:
    """A runner of stand-in engines; `model_dir`: the model folder whose chat format renders the
    golden chats (the stand-ins serve "/models/fake", no folder), for trials with the correctness gate."""
    stored = references or {}

    async def lookup(trial_id: str) -> Reference | None:
        return stored.get(trial_id)

    return TrialRunner(
        settings(**overrides),
        engine_factory=fake_factory(behaviour),
        model_dir=model_dir or tmp_path,
        log_dir=tmp_path / "logs",
        references=lookup,
    )


async def test_a_good_engine_passes_slo_and_stability_with_figures_at_each_rate(tmp_path: Path) -> None:
    trial = runner(tmp_path)
    phases = Phases()
    outcome = await trial.run(
        job(hardware=trial.settings.hardware, rates=(6.0,), target=8.0), progress=phases
    )
    assert outcome.status == "ok", outcome.error
    plan = outcome.plan
    assert plan is not None
    assert plan.rates_rps == (6.0, 8.0, 10.0)  # the target and the gate rate (x1.25) are added
    assert [r.rate_rps for r in outcome.rates] == [6.0, 8.0, 10.0]
    for figures in outcome.rates:
        assert len(figures.runs) == 2 and figures.pooled.requests > 0 and figures.pooled.errors == 0
        assert 10.0 <= figures.pooled.ttft_ms.p50 < 150.0
    assert [g.name for g in outcome.gates] == ["slo", "stability"]
    assert all(g.passed for g in outcome.gates), outcome.gates
    assert outcome.passed and outcome.startup_s > 0
    assert phases.seen[:3] == ["TRIAL_PHASE_STARTING_ENGINE", "TRIAL_PHASE_WARMUP", "TRIAL_PHASE_REPLAYING"]
    assert phases.seen[-1] == "TRIAL_PHASE_GATES"


async def test_a_slow_engine_fails_the_slo_gate_and_higher_rates_are_skipped(tmp_path: Path) -> None:
    trial = runner(tmp_path, behaviour=lambda spec: ["--ttft-ms", "120"])
    outcome = await trial.run(
        job(hardware=trial.settings.hardware, rates=(12.0, 16.0), target=8.0, ttft_p99_ms=50.0),
        progress=Phases(),
    )
    assert outcome.status == "ok", outcome.error
    slo = next(g for g in outcome.gates if g.name == "slo")
    assert not slo.passed and slo.value < 0.9
    assert [r.rate_rps for r in outcome.rates] == [8.0, 10.0]  # 10 (gate) failed: 12 and 16 skipped
    assert outcome.skipped_rates == [12.0, 16.0]


async def test_an_engine_that_never_starts_is_a_failed_trial_with_its_log_tail(tmp_path: Path) -> None:
    trial = runner(tmp_path, behaviour=lambda spec: ["--exit-at-start"])
    outcome = await trial.run(job(hardware=trial.settings.hardware), progress=Phases())
    assert outcome.status == "error"
    assert "exited with code 3" in outcome.error and "planted start failure" in outcome.error
    assert any("planted start failure" in line for line in outcome.log_tail)
    assert not outcome.passed and outcome.gates == []


async def test_an_engine_that_crashes_mid_replay_is_a_failed_trial(tmp_path: Path) -> None:
    trial = runner(tmp_path, behaviour=lambda spec: ["--crash-after", "5"])
    outcome = await trial.run(job(hardware=trial.settings.hardware), progress=Phases())
    assert outcome.status == "error"
    assert "stopped answering" in outcome.error
    assert any("planted crash" in line for line in outcome.log_tail)


async def test_a_passed_deadline_ends_the_trial_as_timeout(tmp_path: Path) -> None:
    trial = runner(tmp_path)
    late = job(hardware=trial.settings.hardware, duration_s=30.0)
    late.deadline.FromDatetime(datetime.now(UTC) + timedelta(seconds=4))
    outcome = await trial.run(late, progress=Phases())
    assert outcome.status == "timeout"
    assert outcome.finished_at - outcome.started_at < 10


async def test_an_invalid_job_is_a_failed_trial_not_an_exception(tmp_path: Path) -> None:
    trial = runner(tmp_path)
    bad = job(hardware=trial.settings.hardware)
    bad.engine_config.max_num_seqs = 0
    outcome = await trial.run(bad, progress=Phases())
    assert outcome.status == "error" and outcome.error.startswith("invalid job: invalid engine config")


async def _baseline(
    tmp_path: Path, config: endpoint_pb2.EngineConfig, model_dir: Path
) -> tuple[TrialOutcome, Reference]:
    trial = runner(tmp_path, model_dir=model_dir)
    outcome = await trial.run(_correctness_job(trial, config, baseline=True), progress=Phases())
    assert outcome.status == "ok" and outcome.gates[0].passed and outcome.golden is not None
    assert outcome.spec is not None
    reference = Reference(
        trial_id=outcome.job.trial_id,
        golden_set_id=outcome.golden.set_id,
        chains=outcome.golden_chains,
        spec=outcome.spec,
    )
    return outcome, reference


def _correctness_job(
    trial: TrialRunner,
    config: endpoint_pb2.EngineConfig,
    *,
    reference: Reference | None = None,
    baseline: bool = False,
    threshold: float = 0.0,
) -> jobs_pb2.TrialJob:
    """A short job of the correctness gate alone: a baseline, or checked against `reference`."""
    return job(
        hardware=trial.settings.hardware,
        config=config,
        gates=("correctness",),
        reference=f"trial:{reference.trial_id}" if reference is not None else "",
        baseline=baseline,
        threshold=threshold,
        duration_s=1.0,
        target=0.0,
        repeats=1,
    )


def _diverge_when(knob: str, value: object, at: int):  # type: ignore[no-untyped-def]
    return lambda spec: ["--diverge-at", str(at)] if getattr(spec, knob) == value else []


async def test_a_planted_wrong_exact_config_fails_the_exact_match_gate(
    tmp_path: Path, tiny_model: Path
) -> None:
    base_config = endpoint_pb2.EngineConfig(engine="vllm", model="/models/fake")
    _, reference = await _baseline(tmp_path, base_config, tiny_model)
    # max_num_seqs is a batching knob (must be exact); this engine answers wrong from token 3 on.
    trial = runner(
        tmp_path,
        behaviour=_diverge_when("max_num_seqs", 7, 3),
        references={reference.trial_id: reference},
        model_dir=tiny_model,
    )
    planted = endpoint_pb2.EngineConfig(engine="vllm", model="/models/fake", max_num_seqs=7)
    outcome = await trial.run(_correctness_job(trial, planted, reference=reference), progress=Phases())
    gate = outcome.gates[0]
    assert outcome.status == "ok" and not gate.passed and not outcome.passed
    assert gate.threshold == 1.0 and math.isclose(gate.value, 3 / 8)
    assert "exact change (max_num_seqs)" in gate.detail and "0/6 answers identical" in gate.detail
    # The same knob on an engine that answers right passes.
    honest = runner(tmp_path, references={reference.trial_id: reference}, model_dir=tiny_model)
    fine = await honest.run(_correctness_job(honest, planted, reference=reference), progress=Phases())
    assert fine.gates[0].passed and fine.gates[0].value == 1.0


async def test_a_lossy_change_passes_or_fails_by_the_policy_threshold(
    tmp_path: Path, tiny_model: Path
) -> None:
    fake = endpoint_pb2.EngineConfig(engine="vllm", model="/models/fake")
    _, reference = await _baseline(tmp_path, fake, tiny_model)
    lossy = endpoint_pb2.EngineConfig(engine="vllm", model="/models/fake", dtype="float32")
    trial = runner(
        tmp_path,
        behaviour=_diverge_when("dtype", "float32", 7),
        references={reference.trial_id: reference},
        model_dir=tiny_model,
    )
    results = {}
    for threshold in (0.8, 0.95):
        outcome = await trial.run(
            _correctness_job(trial, lossy, reference=reference, threshold=threshold), progress=Phases()
        )
        results[threshold] = outcome.gates[0]
    assert (
        math.isclose(results[0.8].value, 7 / 8)
        and results[0.8].passed
        and "lossy change (dtype)" in results[0.8].detail
    )
    assert not results[0.95].passed and results[0.95].threshold == 0.95
    # This engine sends no logprobs: the gate falls back to token agreement.
    assert "tokens agree" in results[0.8].detail and "top-k" not in results[0.8].detail


async def test_a_missing_reference_fails_before_any_engine_starts(tmp_path: Path) -> None:
    trial = runner(tmp_path, behaviour=lambda spec: ["--exit-at-start"])
    outcome = await trial.run(
        job(hardware=trial.settings.hardware, gates=("correctness",), reference="trial:nowhere"),
        progress=Phases(),
    )
    assert (
        outcome.status == "error" and "reference trial nowhere has no stored golden answers" in outcome.error
    )
    assert math.isnan(outcome.startup_s)


def test_engine_spec_defaults_fill_what_the_job_leaves_out(tmp_path: Path) -> None:
    from evertune.runner.job import engine_spec, plan_trial

    plan = plan_trial(job(hardware="cpu", config=endpoint_pb2.EngineConfig()), slo_headroom=1.25)
    spec = engine_spec(plan, default_model=str(tmp_path), simulated=False, cpu_default_kv_gib=2.0, cpu=True)
    assert spec == EngineSpec(model=str(tmp_path), kv_cache_space_gib=2.0)
    sim = engine_spec(plan, default_model=str(tmp_path), simulated=True, cpu_default_kv_gib=2.0, cpu=False)
    assert sim.kind == "sim" and sim.kv_cache_space_gib is None


async def test_a_sim_runner_runs_the_performance_model_through_the_same_path(
    tmp_path: Path, tiny_model: Path
) -> None:
    config = settings(hardware="sim-h200")

    async def no_reference(trial_id: str) -> Reference | None:
        return None

    trial = TrialRunner(
        config,
        engine_factory=default_engine_factory(config),
        model_dir=tiny_model,
        log_dir=tmp_path / "logs",
        references=no_reference,
    )
    outcome = await trial.run(
        job(hardware="sim-h200", config=endpoint_pb2.EngineConfig(), gates=("correctness", "slo"),
            reference="trial:anything", rates=(8.0,), target=0.0, repeats=1, duration_s=1.5),
        progress=Phases(),
    )  # fmt: skip
    assert outcome.status == "ok", (outcome.error, outcome.log_tail[-3:])
    assert outcome.spec is not None and outcome.spec.kind == "sim" and outcome.spec.model == str(tiny_model)
    assert outcome.rates[0].pooled.requests > 0 and outcome.rates[0].pooled.errors == 0
    correctness, slo = outcome.gates
    assert not correctness.passed and "simulated trial" in correctness.detail and outcome.golden_chains == []
    assert slo.passed and not outcome.passed
