"""The roofline counts the tiny model's FLOPs and bytes as worked out by hand."""

from __future__ import annotations

import pytest

from evertune.domain.engines.hardware import NAMED_PROFILES, HardwareProfile
from evertune.domain.perfmodel.arch import ModelArch
from evertune.domain.perfmodel.steptime import Efficiency, StepCost
from evertune.errors import InvalidArgument


def test_tiny_model_counts(tiny_arch: ModelArch) -> None:
    # q,o: 2*256*256; k,v: 2*256*128; mlp: 3*256*768
    assert tiny_arch.layer_params == 131072 + 65536 + 589824
    assert tiny_arch.weight_bytes == (4 * 786432 + 256 * 4096) * 2
    assert tiny_arch.kv_bytes_per_token == 2 * 4 * 2 * 64 * 2


def test_step_time_is_the_slower_of_compute_and_memory_plus_overheads(
    tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    eff = Efficiency(compute=0.5, bandwidth=0.25, step_overhead_s=0.002, seq_overhead_s=0.0001)
    cost = StepCost.of(tiny_arch, cpu, eff)
    # A 1000-token prefill from nothing, sampling once.
    flops = 2 * 1000 * 4 * 786432 + 2 * 256 * 4096 + 4 * 4 * 4 * 64 * (1000 * 1001 / 2)
    act = 2 * 4 * (2 * 256 + 768) * 2
    byts = (4 * 786432 + 256 * 4096) * 2 + 1000 * (act + 2048)
    compute_s = flops / (cpu.peak_flops * 0.5)
    memory_s = byts / (cpu.memory_bandwidth * 0.25)
    expected = max(compute_s, memory_s) + 0.002 + 0.0001
    got = cost.time(tokens=1000, samples=1, pairs=1000 * 1001 / 2, context=0, seqs=1)
    assert got == pytest.approx(expected, rel=1e-12)
    # A decode over 1000 context tokens is memory-bound: weights + KV read dominate.
    decode = cost.time(tokens=1, samples=1, pairs=1001, context=1000, seqs=1)
    memory_decode = ((4 * 786432 + 256 * 4096) * 2 + act + 2048 + 1000 * 2048) / (cpu.memory_bandwidth * 0.25)
    assert decode == pytest.approx(memory_decode + 0.0021, rel=1e-12)


def test_tensor_parallel_divides_the_roofline(tiny_arch: ModelArch) -> None:
    h200 = NAMED_PROFILES["h200"]
    one = StepCost.of(tiny_arch, h200, Efficiency(), tp=1)
    two = StepCost.of(tiny_arch, h200, Efficiency(), tp=2)
    assert two.time(tokens=4096, samples=4, pairs=4096.0 * 4096, context=0, seqs=4) == pytest.approx(
        one.time(tokens=4096, samples=4, pairs=4096.0 * 4096, context=0, seqs=4) / 2
    )


def test_every_named_profile_has_roofline_figures() -> None:
    assert set(NAMED_PROFILES) >= {"h100", "h200", "b200", "mi355x"}
    for profile in NAMED_PROFILES.values():
        assert profile.peak_flops > 1e14 and profile.memory_bandwidth > 1e12
    assert NAMED_PROFILES["h200"].memory_bandwidth > NAMED_PROFILES["h100"].memory_bandwidth


def test_bad_factors_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="positive"):
        Efficiency(compute=0.0)
    with pytest.raises(InvalidArgument, match="negative"):
        Efficiency(step_overhead_s=-1.0)
