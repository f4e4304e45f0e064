"""Prefix reuse: one definition, and the profiler and the drift test count by it alike."""

from __future__ import annotations

from evertune.domain.workloads.prefix_reuse import HORIZON_S, leading_reused, reused_tokens
from evertune.profiler.profile import chain_structure
from evertune.sla_monitor.drift_reference import PrefixReuseTracker
from tests.profiler.synthetic import voice


def test_only_a_leading_run_of_blocks_sent_within_the_horizon_counts() -> None:
    seen = {1: 100.0, 2: 100.0, 3: 10.0, 4: 100.0}
    assert leading_reused((1, 2, 3, 4), seen, now=150.0, horizon_s=60.0) == 2  # 3 is too old
    assert leading_reused((1, 2, 3, 4), seen, now=150.0, horizon_s=float("inf")) == 4
    assert leading_reused((9, 1, 2), seen, now=150.0, horizon_s=60.0) == 0  # a new first block
    assert leading_reused((1, 2), seen, now=160.0, horizon_s=60.0) == 2  # exactly the horizon
    assert leading_reused((), seen, now=150.0, horizon_s=60.0) == 0


def test_reused_tokens_are_whole_blocks_never_more_than_the_prompt() -> None:
    assert reused_tokens(3, block_tokens=16, prompt_tokens=100) == 48
    assert reused_tokens(7, block_tokens=16, prompt_tokens=100) == 100
    assert reused_tokens(0, block_tokens=16, prompt_tokens=100) == 0


def test_the_profiler_and_the_drift_tracker_count_the_same_reused_blocks() -> None:
    """Request by request, after the tracker's priming: the same leading blocks, the same tokens."""
    block = 16
    generated = voice(seed=3, duration_s=900.0, calls_per_s=0.5, block=block)
    samples = sorted((g.sample for g in generated), key=lambda s: s.start_s)
    structure = chain_structure(samples, horizon_s=HORIZON_S)
    tracker = PrefixReuseTracker(horizon_s=HORIZON_S, max_hashes=1_000_000)
    compared = reused = 0
    for i, sample in enumerate(samples):
        counted = tracker.observe(
            sample.start_s, sample.prefix_hashes, block_tokens=block, prompt_tokens=sample.prompt_tokens
        )
        if counted is None:  # priming: the first horizon of the stream
            continue
        profiler = reused_tokens(
            structure.reused_blocks[i], block_tokens=block, prompt_tokens=sample.prompt_tokens
        )
        assert counted == (profiler, sample.prompt_tokens), i
        compared += 1
        reused += profiler > 0
    assert compared > 300 and reused > compared // 2  # a stream long past priming, mostly reusing
