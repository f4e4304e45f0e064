"""The scheduler and block pool reproduce vLLM V1's rules on cases small enough to work by hand."""

from __future__ import annotations

import pytest

from evertune.domain.perfmodel.scheduler import BlockPool, Scheduler, SchedulerConfig, SimRequest
from evertune.domain.perfmodel.workload import block_hashes
from evertune.errors import InvalidArgument


def _config(**over: object) -> SchedulerConfig:
    fields: dict[str, object] = {
        "max_num_seqs": 8,
        "max_num_batched_tokens": 512,
        "block_size": 16,
        "num_blocks": 1000,
        "chunked_prefill": True,
        "prefix_caching": True,
    }
    fields.update(over)
    return SchedulerConfig(**fields)  # type: ignore[arg-type]


def _request(
    index: int, prompt: int, out: int, *, seed: int | None = None, block_size: int = 16
) -> SimRequest:
    base = index if seed is None else seed
    ids = [base * 100_000 + j for j in range(prompt)]
    return SimRequest(
        index=index, arrival_s=0.0, prompt_tokens=prompt, max_tokens=out, hashes=block_hashes(ids, block_size)
    )


def _drain(scheduler: Scheduler, *, limit: int = 10_000) -> list[list[int]]:
    """Run steps at t = step number until idle; returns each step's token counts."""
    steps: list[list[int]] = []
    t = 0.0
    while scheduler.has_work and len(steps) < limit:
        plan = scheduler.schedule(t)
        if not plan.requests:
            break
        t += 1.0
        scheduler.complete(plan, t)
        steps.append(plan.tokens)
    return steps


def test_one_request_alone_prefills_in_one_step_then_decodes_one_token_a_step() -> None:
    scheduler = Scheduler(_config(), check_invariants=True)
    request = _request(0, 100, 4)
    scheduler.add(request)
    steps = _drain(scheduler)
    assert steps == [[100], [1], [1], [1]]
    assert request.first_token_s == 1.0
    assert request.gaps == [1.0, 1.0, 1.0]
    assert request.finished_s == 4.0
    assert scheduler.pool.used == 0  # blocks freed at the end


def test_a_batch_fills_the_token_budget_exactly_and_chunks_the_prompt_that_does_not_fit() -> None:
    scheduler = Scheduler(_config(max_num_batched_tokens=512), check_invariants=True)
    a, b, c = _request(0, 300, 2), _request(1, 300, 2), _request(2, 300, 2)
    for r in (a, b, c):
        scheduler.add(r)
    first = scheduler.schedule(0.0)
    assert first.tokens == [300, 212]  # a whole, b chunked to the budget; c waits
    assert first.requests == [a, b]
    scheduler.complete(first, 1.0)
    second = scheduler.schedule(1.0)
    # Running first: a decodes 1, b finishes its prompt (88); then c gets what is left (423 >= 300).
    assert second.tokens == [1, 88, 300]
    assert a.output_tokens == 1 and b.output_tokens == 0


def test_without_chunked_prefill_a_prompt_that_does_not_fit_waits_whole() -> None:
    scheduler = Scheduler(_config(max_num_batched_tokens=512, chunked_prefill=False), check_invariants=True)
    a, b = _request(0, 300, 2), _request(1, 300, 2)
    scheduler.add(a)
    scheduler.add(b)
    assert scheduler.schedule(0.0).tokens == [300]


def test_max_num_seqs_caps_running_requests() -> None:
    scheduler = Scheduler(_config(max_num_seqs=2), check_invariants=True)
    for i in range(3):
        scheduler.add(_request(i, 10, 3))
    plan = scheduler.schedule(0.0)
    assert plan.tokens == [10, 10]
    assert len(scheduler.waiting) == 1


def test_second_identical_prompt_hits_the_prefix_cache_but_computes_its_last_token() -> None:
    scheduler = Scheduler(_config(), check_invariants=True)
    first = _request(0, 100, 2, seed=7)
    scheduler.add(first)
    _drain(scheduler)
    second = _request(1, 100, 2, seed=7)
    scheduler.add(second)
    plan = scheduler.schedule(10.0)
    # 100 tokens = 6 full blocks of 16 (96 tokens) + 4: all 6 blocks hit, 4 tokens computed.
    assert plan.tokens == [4]
    assert scheduler.prefix_hits == 96
    assert scheduler.prefix_queries == 200
    # A prompt that is exactly full blocks still computes its last block (vLLM recomputes the last token).
    third = _request(2, 96, 2, seed=7)
    scheduler.complete(plan, 11.0)
    _drain(scheduler)
    scheduler.add(third)
    assert scheduler.schedule(20.0).tokens == [16]


def test_prefix_caching_off_reuses_nothing() -> None:
    scheduler = Scheduler(_config(prefix_caching=False), check_invariants=True)
    scheduler.add(_request(0, 100, 1, seed=7))
    _drain(scheduler)
    scheduler.add(_request(1, 100, 1, seed=7))
    assert scheduler.schedule(5.0).tokens == [100]
    assert scheduler.prefix_hits == 0


def test_full_kv_preempts_the_last_running_request_and_recomputes_it() -> None:
    # 10 blocks of 16 tokens; two requests of 64 prompt tokens and 40 outputs need 7 blocks each.
    scheduler = Scheduler(_config(num_blocks=10), check_invariants=True)
    a, b = _request(0, 64, 40), _request(1, 64, 40)
    scheduler.add(a)
    scheduler.add(b)
    steps = _drain(scheduler)
    assert scheduler.preemptions >= 1
    assert b.preemptions >= 1 and a.preemptions == 0  # the later one is the victim
    assert a.output_tokens == 40 and b.output_tokens == 40
    # b's recompute covers its prompt and the tokens it had generated (prefix blocks may be reused).
    assert any(len(tokens) == 1 and tokens[0] > 1 for tokens in steps[1:])
    assert scheduler.pool.used == 0


def test_a_step_that_preempts_admits_no_waiting_request() -> None:
    scheduler = Scheduler(_config(num_blocks=9), check_invariants=True)
    a, b = _request(0, 64, 40), _request(1, 64, 40)
    scheduler.add(a)
    scheduler.add(b)
    t = 0.0
    while not scheduler.preemptions:
        plan = scheduler.schedule(t)
        t += 1
        scheduler.complete(plan, t)
    assert plan.preempted >= 1
    assert plan.requests == [a]  # b was preempted and not readmitted in the same step


def test_free_blocks_are_reused_least_recently_freed_first_tail_block_first() -> None:
    pool = BlockPool(4)
    held = pool.take(3)
    assert held == [0, 1, 2]
    for block, h in zip(held, (11, 12, 13), strict=True):
        pool.register(block, h)
    pool.release(held)
    pool.check()
    # Free queue: 3 (never used), then 2, 1, 0 (the request's blocks, last one first).
    assert pool.free_order() == [3, 2, 1, 0]
    assert pool.take(2) == [3, 2]
    assert 13 not in pool.cached and pool.cached == {11: 0, 12: 1}  # block 2 evicted, lost its hash
    # A hit on a free cached block takes it out of the free queue.
    hits = pool.hits([11, 12, 13], limit=3)
    assert hits == [0, 1]
    pool.touch(hits)
    assert pool.free_order() == []
    pool.check()


def test_a_request_needs_a_prompt_and_an_output() -> None:
    with pytest.raises(InvalidArgument, match="at least 1"):
        SimRequest(index=0, arrival_s=0.0, prompt_tokens=0, max_tokens=1, hashes=())


def test_config_refuses_zero_capacity() -> None:
    with pytest.raises(InvalidArgument, match="num_blocks"):
        _config(num_blocks=0)
