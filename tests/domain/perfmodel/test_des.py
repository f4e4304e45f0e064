"""The event queue's key (time, priority, sequence) and what the tie rules mean for requests."""

from __future__ import annotations

from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.perfmodel.arch import ModelArch
from evertune.domain.perfmodel.des import ARRIVAL, STEP_END, STEP_START, EventQueue, World, run
from evertune.domain.perfmodel.scheduler import Scheduler, SchedulerConfig, SimRequest
from evertune.domain.perfmodel.steptime import Efficiency, StepCost


class _Tag:
    """An event that only carries a name."""

    def __init__(self, time_s: float, priority: int, name: str) -> None:
        self.time_s = time_s
        self.priority = priority
        self.name = name

    def fire(self, world: World) -> list[object]:
        return []


def test_queue_orders_by_time_then_priority_then_push_order() -> None:
    queue = EventQueue()
    events = [
        _Tag(2.0, STEP_END, "late"),
        _Tag(1.0, STEP_START, "start"),
        _Tag(1.0, ARRIVAL, "arrival-a"),
        _Tag(1.0, STEP_END, "end"),
        _Tag(1.0, ARRIVAL, "arrival-b"),
        _Tag(0.5, STEP_START, "early"),
    ]
    for event in events:
        queue.push(event)
    assert queue.key_of_next() == (0.5, STEP_START, 5)
    order = [queue.pop().name for _ in range(len(events))]  # type: ignore[attr-defined]
    assert order == ["early", "end", "arrival-a", "arrival-b", "start", "late"]


def test_priorities_are_step_end_then_arrival_then_step_start() -> None:
    assert STEP_END < ARRIVAL < STEP_START


class _FixedCost(StepCost):
    """Every step takes 1 s (a StepCost whose time ignores the shape)."""

    def time(self, *, tokens: int, samples: int, pairs: float, context: int, seqs: int) -> float:
        return 1.0


def _world(cpu: HardwareProfile, arch: ModelArch) -> World:
    base = StepCost.of(arch, cpu, Efficiency())
    cost = _FixedCost(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    config = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=512,
        block_size=16,
        num_blocks=100,
        chunked_prefill=True,
        prefix_caching=True,
    )
    return World(scheduler=Scheduler(config, check_invariants=True), cost=cost)


def _req(index: int, at: float, out: int = 3) -> SimRequest:
    return SimRequest(index=index, arrival_s=at, prompt_tokens=20, max_tokens=out, hashes=(index,))


def test_an_arrival_at_the_instant_a_step_ends_joins_the_next_step(
    cpu: HardwareProfile, tiny_arch: ModelArch
) -> None:
    world = _world(cpu, tiny_arch)
    first, second = _req(0, 0.0), _req(1, 1.0)  # the first step ends at exactly 1.0
    run(world, [first, second])
    assert second.scheduled_s == 1.0
    assert second.first_token_s == 2.0  # prefilled in the step 1.0 -> 2.0, beside first's decode
    assert first.gaps == [1.0, 1.0]


def test_an_idle_engine_wakes_on_arrival_and_only_one_step_is_in_flight(
    cpu: HardwareProfile, tiny_arch: ModelArch
) -> None:
    world = _world(cpu, tiny_arch)
    requests = [_req(0, 0.0, out=2), _req(1, 0.25, out=2), _req(2, 10.0, out=1)]
    run(world, requests)
    # 0: steps [0,1] prefill r0, [1,2] r0 decode + r1 prefill, [2,3] r1 decode; idle; [10,11] r2.
    assert [r.finished_s for r in requests] == [2.0, 3.0, 11.0]
    assert world.steps == 4
    assert world.busy_s == 4.0
