"""Figures of fixed simulations, pinned: a speed-up of the simulator must not change its results.

The numbers were produced by the simulator before its speed work (commit 2754216) on a 300 s voice
plan (seed 5) with the tiny model's tokenizer; any change to them is a change of the model, which
belongs in its own commit with the new figures explained.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.domain.engines import EngineSpec
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.perfmodel.arch import ModelArch
from evertune.domain.perfmodel.simulate import simulate
from evertune.domain.perfmodel.steptime import Efficiency
from evertune.domain.perfmodel.workload import PromptTokens, prepare
from evertune.domain.workloads import VoiceWorkload, WordListText, plan_voice

EFF = Efficiency(
    compute=0.06,
    bandwidth=0.3,
    attention=1.0,
    step_overhead_s=0.001,
    seq_overhead_s=5e-5,
    request_overhead_s=0.008,
)

#: (spec, rate) -> steps, preemptions, prefix hit rate, TTFT p50/p99, ITL p50/p99, sums of TTFT and gaps (ms)
PINNED = [
    (
        EngineSpec(model="m", kv_cache_space_gib=2),
        4.0,
        (9963, 0, 0.9136994161125924, 16.74275671854275, 28.971904476912293, 5.280859574467556),
        (10.163441134750428, 12980.37413690875, 109921.96583028877),
    ),
    (
        EngineSpec(model="m", kv_cache_space_gib=0.02, max_num_batched_tokens=1024),
        6.0,
        (6690, 4, 0.8778656552225865, 20.81915318368832, 295.61727676433566, 7.036205200947165),
        (27.611183247060467, 31189.450861933514, 177890.6835341293),
    ),
]


@pytest.mark.parametrize(("spec", "rate", "head", "tail"), PINNED, ids=["roomy-kv", "preempting"])
def test_a_fixed_voice_simulation_keeps_its_figures(
    tiny_model_dir: Path,
    tiny_arch: ModelArch,
    cpu: HardwareProfile,
    spec: EngineSpec,
    rate: float,
    head: tuple[int, int, float, float, float, float],
    tail: tuple[float, float, float],
) -> None:
    plan = plan_voice(VoiceWorkload(duration_s=300, peak_calls_per_s=1.0, seed=5), text=WordListText())
    inputs = prepare(plan, PromptTokens.of_folder(tiny_model_dir), block_size=128)
    assert len(inputs) == 733
    figures = simulate(inputs, spec, cpu, tiny_arch, efficiency=EFF, rate=rate)
    s = figures.summary
    steps, preemptions, hit_rate, ttft_p50, ttft_p99, itl_p50 = head
    itl_p99, ttft_sum, gap_sum = tail
    assert figures.steps == steps
    assert figures.preemptions == preemptions
    assert figures.unfinished == 0
    got = [
        figures.prefix_hit_rate,
        s.ttft_ms.p50,
        s.ttft_ms.p99,
        s.itl_ms.p50,
        s.itl_ms.p99,
        sum(r.ttft_ms or 0.0 for r in figures.results),
        sum(sum(r.itl_ms) for r in figures.results),
    ]
    want = [hit_rate, ttft_p50, ttft_p99, itl_p50, itl_p99, ttft_sum, gap_sum]
    assert got == pytest.approx(want, rel=1e-9)
