"""simulate() and sim_goodput(): the searcher's questions, answered from a workload plan."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from evertune.domain.engines import EngineSpec, get_profile
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.model import load_tokenizer
from evertune.domain.perfmodel.arch import ModelArch
from evertune.domain.perfmodel.simulate import resolve, sim_goodput, simulate
from evertune.domain.perfmodel.steptime import Efficiency, StepCost
from evertune.domain.perfmodel.workload import (
    PromptTokens,
    SimInput,
    block_hashes,
    prepare,
    primer_inputs,
    synthetic,
)
from evertune.domain.slo import Slo
from evertune.domain.workloads import VoiceWorkload, plan_voice
from evertune.domain.workloads.plan import history
from evertune.errors import InvalidArgument

EFF = Efficiency(
    compute=0.06,
    bandwidth=0.3,
    attention=1.0,
    step_overhead_s=0.001,
    seq_overhead_s=5e-5,
    request_overhead_s=0.008,
)
SPEC = EngineSpec(model="m", kv_cache_space_gib=2)


def test_one_request_alone_takes_exactly_the_modelled_steps(
    tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    figures = simulate(
        synthetic(count=1, prompt_tokens=300, max_tokens=3, block_size=128),
        SPEC,
        cpu,
        tiny_arch,
        efficiency=EFF,
    )
    cost = StepCost.of(tiny_arch, cpu, EFF)
    prefill = cost.time(tokens=300, samples=1, pairs=300 * 301 / 2, context=0, seqs=1)
    decode1 = cost.time(tokens=1, samples=1, pairs=301, context=300, seqs=1)
    decode2 = cost.time(tokens=1, samples=1, pairs=302, context=301, seqs=1)
    (result,) = figures.results
    assert result.ttft_ms == pytest.approx((EFF.request_overhead_s + prefill) * 1000)
    assert result.itl_ms == pytest.approx((decode1 * 1000, decode2 * 1000))
    assert figures.steps == 3


def test_kv_capacity_follows_the_knob(tiny_arch: ModelArch, cpu: HardwareProfile) -> None:
    config = resolve(SPEC, cpu, tiny_arch)
    assert config.block_size == 128  # vLLM's CPU default
    assert config.num_blocks == 2 * 2**30 // (128 * tiny_arch.kv_bytes_per_token)
    assert resolve(EngineSpec(model="m"), get_profile("h200"), tiny_arch).block_size == 16


def test_a_prompt_larger_than_the_kv_cache_never_finishes_and_is_counted(
    tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    tiny_kv = EngineSpec(model="m", kv_cache_space_gib=0.0005, block_size=32)  # 8 blocks of 32 tokens
    figures = simulate(
        synthetic(count=1, prompt_tokens=1000, max_tokens=2, block_size=32), tiny_kv, cpu, tiny_arch
    )
    assert figures.unfinished == 1
    assert figures.summary.errors == 1


def test_voice_workload_shares_prefixes_and_load_raises_latency(
    tiny_model_dir: Path, tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    plan = plan_voice(VoiceWorkload(duration_s=120, peak_calls_per_s=0.5, seed=3))
    inputs = prepare(plan, PromptTokens.of_folder(tiny_model_dir), block_size=128)
    assert [i.arrival_s for i in inputs] == sorted(i.arrival_s for i in inputs)
    calm = simulate(inputs, SPEC, cpu, tiny_arch, efficiency=EFF, check_invariants=True)
    busy = simulate(inputs, SPEC, cpu, tiny_arch, efficiency=EFF, rate=8.0)
    assert calm.unfinished == 0 and calm.summary.completed == len(plan)
    assert calm.prefix_hit_rate > 0.5  # every turn resends its agent's system prompt
    assert busy.summary.ttft_ms.p99 > calm.summary.ttft_ms.p99
    assert busy.summary.throughput_rps > calm.summary.throughput_rps
    no_cache = simulate(
        inputs, SPEC.model_copy(update={"enable_prefix_caching": False}), cpu, tiny_arch, efficiency=EFF
    )
    assert math.isnan(no_cache.prefix_hit_rate)
    assert no_cache.summary.ttft_ms.p50 > calm.summary.ttft_ms.p50


def test_fast_forward_of_decode_stretches_changes_no_result(
    tiny_model_dir: Path, tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    plan = plan_voice(VoiceWorkload(duration_s=120, peak_calls_per_s=0.5, seed=3))
    inputs = prepare(plan, PromptTokens.of_folder(tiny_model_dir), block_size=128)
    small_kv = SPEC.model_copy(update={"kv_cache_space_gib": 0.02, "max_num_batched_tokens": 1024})
    for spec, rate in ((SPEC, 4.0), (small_kv, 8.0)):
        fast = simulate(inputs, spec, cpu, tiny_arch, efficiency=EFF, rate=rate, check_invariants=True)
        slow = simulate(inputs, spec, cpu, tiny_arch, efficiency=EFF, rate=rate, fast_forward=False)
        assert fast.steps == slow.steps
        assert fast.preemptions == slow.preemptions
        for a, b in zip(fast.results, slow.results, strict=True):
            assert a.ttft_ms == pytest.approx(b.ttft_ms, rel=1e-9)
            assert a.itl_ms == pytest.approx(b.itl_ms, rel=1e-9, abs=1e-9)


def test_prompt_tokens_follow_the_chat_template(tiny_model_dir: Path) -> None:
    from evertune.domain.model import count_chat_tokens

    tokenizer = load_tokenizer(tiny_model_dir)
    plan = plan_voice(VoiceWorkload(duration_s=30, peak_calls_per_s=0.5, seed=1))
    tokens = PromptTokens.of_folder(tiny_model_dir)
    for request in plan[:5]:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        assert len(tokens.prompt(request)) == count_chat_tokens(tokenizer, messages)


def test_goodput_search_brackets_the_slo(
    tiny_model_dir: Path, tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    plan = plan_voice(VoiceWorkload(duration_s=120, peak_calls_per_s=0.5, seed=3))
    inputs = prepare(plan, PromptTokens.of_folder(tiny_model_dir), block_size=128)
    slo = Slo(ttft_ms=100.0, itl_ms=50.0)
    result = sim_goodput(inputs, SPEC, cpu, tiny_arch, slo=slo, low_rps=1.0, high_rps=50.0, efficiency=EFF)
    tokens = PromptTokens.of_folder(tiny_model_dir)
    from_plan = sim_goodput(
        plan, SPEC, cpu, tiny_arch, slo=slo, low_rps=1.0, high_rps=50.0, efficiency=EFF, tokens=tokens
    )
    assert from_plan.goodput_rps == result.goodput_rps  # a plan is prepared the same way
    with pytest.raises(InvalidArgument, match="tokens="):
        simulate(plan, SPEC, cpu, tiny_arch)
    assert result.goodput_rps > 0 and result.failing_rps is not None
    assert result.goodput_rps < result.failing_rps
    assert all(p.meets for p in result.probes if p.rps <= result.goodput_rps)


def test_equal_prompts_hash_equal_and_partial_blocks_do_not_hash() -> None:
    assert block_hashes(list(range(300)), 128) == block_hashes(list(range(300)), 128)
    assert len(block_hashes(list(range(300)), 128)) == 2
    assert block_hashes([1, *range(1, 256)], 128)[1] != block_hashes([2, *range(1, 256)], 128)[1]  # chained


def test_an_empty_workload_is_refused(tiny_arch: ModelArch, cpu: HardwareProfile) -> None:
    with pytest.raises(InvalidArgument, match="no request"):
        simulate([], SPEC, cpu, tiny_arch)


def test_synthetic_requests_share_exactly_their_prefix_blocks() -> None:
    a, b = synthetic(count=2, prompt_tokens=700, max_tokens=1, block_size=128, prefix_tokens=512)
    assert a.hashes[:4] == b.hashes[:4]
    assert a.hashes[4] != b.hashes[4]
    c, d = synthetic(count=2, prompt_tokens=700, max_tokens=1, block_size=128)
    assert c.hashes[0] != d.hashes[0]


def test_the_per_token_request_overhead_delays_the_first_token_by_prompt_length(
    tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    inputs = synthetic(count=1, prompt_tokens=300, max_tokens=2, block_size=128)
    plain = simulate(inputs, SPEC, cpu, tiny_arch, efficiency=EFF)
    per_token = simulate(
        inputs, SPEC, cpu, tiny_arch, efficiency=replace(EFF, request_overhead_per_token_s=1e-5)
    )
    (a,), (b,) = plain.results, per_token.results
    assert a.ttft_ms is not None and b.ttft_ms is not None
    assert b.ttft_ms == pytest.approx(a.ttft_ms + 300 * 1e-5 * 1000)
    assert b.itl_ms == pytest.approx(a.itl_ms)


def test_a_primed_window_starts_with_each_conversation_history_cached(
    tiny_model_dir: Path, tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    plan = plan_voice(VoiceWorkload(duration_s=60, peak_calls_per_s=1.0, seed=3))
    tokens = PromptTokens.of_folder(tiny_model_dir)
    inputs = prepare(plan, tokens, block_size=16)
    by_id = {r.request_id: r for r in plan}
    first_turns: dict[str, SimInput] = {}
    for x in inputs:
        first_turns.setdefault(x.conversation_id, x)
    under_way = [x for x in first_turns.values() if x.history_tokens]
    assert len(under_way) >= 3  # voice traffic opens in mid-conversation
    for x in inputs:
        request = by_id[x.request_id]
        if not history(request):
            assert x.history_tokens == 0
            continue
        whole = tokens.prompt(request)
        alone = tokens.prompt(replace(request, messages=history(request)))
        assert whole[: x.history_tokens] == alone[: x.history_tokens]
        assert x.history_tokens < len(alone) <= x.history_tokens + 3  # + the generation prompt
    primers = primer_inputs(inputs, block_size=16)
    assert [p.request_id for p in primers] == [x.request_id + "/prime" for x in under_way]
    for p, x in zip(primers, under_way, strict=True):
        assert p.max_tokens == 1
        assert p.hashes == block_hashes(tokens.prompt(by_id[x.request_id])[: x.history_tokens], 16)
    spec = SPEC.model_copy(update={"block_size": 16})
    cold = simulate(inputs, spec, cpu, tiny_arch, efficiency=EFF, rate=4.0)
    primed = simulate(inputs, spec, cpu, tiny_arch, efficiency=EFF, rate=4.0, warm=primers)
    assert [r.request_id for r in primed.results] == [x.request_id for x in inputs]  # primers unscored
    assert primed.summary.completed == cold.summary.completed == len(inputs)
    ttft = {r.request_id: r.ttft_ms or math.inf for r in cold.results}
    warm_ttft = {r.request_id: r.ttft_ms or math.inf for r in primed.results}
    opening = [x.request_id for x in under_way]
    assert sum(warm_ttft[i] for i in opening) < 0.8 * sum(ttft[i] for i in opening)
