"""The discrete-event simulation around the scheduler: arrivals and engine steps in simulated time.

Four kinds of event, each with a time and a fixed priority, ordered by the key
`(time_s, priority, sequence)`:

- `STEP_END` (0, a step's or a decode stretch's end) before `ARRIVAL` (1) before `STEP_START` (2)
  at the same time: a step that ends at t delivers its tokens first, a request arriving at exactly
  t still joins the step that starts at t (as in vLLM, where the next `schedule()` runs after the
  step's outputs are processed and sees whatever was added meanwhile);
- among equal (time, priority), the order they were queued (`sequence`, a counter).

One engine: at most one step is in flight, and a step start is pending only while none is. So the
queue never holds more than two events: the next arrival (in arrival order; equal arrival times
keep the workload's order) and one engine event (a step start, or the end of the step or stretch
in flight). `run` merges those two by the key above instead of keeping a heap, and handles each
kind inline (the simulator's inner loop: a function call or an object less per event shows in
`evertune bench sim-speed`). `EventQueue` is the same order for a general set of events.

Fast-forward: when the next steps are pure decodes (nothing waits, every running request has one
token to compute, blocks suffice; `Scheduler.decode_limit`), a step start plans them all at once,
up to the last step that starts before the next arrival (an arrival at exactly a step's start
joins that step, so it ends the stretch), and one stretch end applies them. Step times are
computed step by step as before, so results equal the one-step-at-a-time run (tested); the saving
is the per-request work of every step.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import heapq
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from evertune.domain.perfmodel.scheduler import Scheduler, SimRequest, StepPlan
from evertune.domain.perfmodel.steptime import StepCost

STEP_END = 0
ARRIVAL = 1
STEP_START = 2
INF = float("inf")
#: The engine's pending event in `run` (STEP_END and STEP_START are the priorities above).
_IDLE = -1
_STRETCH_END = 3


class Event(Protocol):
    """Something queued at `time_s` with a tie-break `priority` (lower first)."""

    @property
    def time_s(self) -> float: ...

    @property
    def priority(self) -> int: ...


@dataclass
class World:
    """The simulated engine: its scheduler, its step cost, and what the event loop counts."""

    scheduler: Scheduler  #: vLLM's scheduler and block pool
    cost: StepCost  #: step time model
    steps: int = 0  #: steps run
    busy_s: float = 0.0  #: simulated seconds spent in steps
    finished: list[SimRequest] = field(default_factory=list)  #: requests that finished, in order
    fast_forward: bool = True  #: apply runs of pure-decode steps at once (see the module doc)
    next_event_s: float = INF  #: time of the next arrival, the horizon of a decode stretch


def run(world: World, requests: Iterable[SimRequest]) -> World:
    """Simulate `requests` (each arrives at its `arrival_s`) until no event is left (see the module
    doc for the order of events)."""
    scheduler = world.scheduler
    cost = world.cost
    finished = world.finished
    fast_forward = world.fast_forward
    add = scheduler.add
    steps = world.steps
    busy_s = world.busy_s
    with paused_gc():
        ordered = sorted(requests, key=lambda r: r.arrival_s)
        count = len(ordered)
        i = 0
        arrival_s = ordered[0].arrival_s if count else INF
        kind = _IDLE  # the pending engine event
        at_s = INF  # its time
        plan: StepPlan | None = None  # the step in flight (kind STEP_END)
        ends: list[float] = []  # the stretch in flight (kind _STRETCH_END)
        while True:
            if kind != _IDLE and (at_s < arrival_s or (at_s == arrival_s and kind != STEP_START)):
                if kind == STEP_START:
                    # Plan a step (or a stretch of decodes up to the next arrival); idle if empty.
                    # (`decode_limit` is 0 while a request waits: checked here, the common case.)
                    limit = scheduler.decode_limit() if fast_forward and not scheduler.waiting else 0
                    if limit > 1:
                        world.next_event_s = arrival_s
                        ends = decode_ends(world, at_s, limit)
                        steps += len(ends)
                        busy_s += ends[-1] - at_s
                        kind, at_s = _STRETCH_END, ends[-1]
                        continue
                    plan = scheduler.schedule(at_s)
                    if not plan.requests:
                        kind, at_s = _IDLE, INF
                        continue
                    duration = plan_time(cost, plan)
                    steps += 1
                    busy_s += duration
                    kind, at_s = STEP_END, at_s + duration
                    continue
                # The step or the stretch ends: tokens sampled, finished requests leave.
                if kind == STEP_END:
                    assert plan is not None
                    done = scheduler.complete(plan, at_s)
                else:
                    done = scheduler.complete_decodes(ends)
                if done:
                    finished.extend(done)
                kind = STEP_START if (scheduler.waiting or scheduler.running) else _IDLE
            elif i < count:
                # An arrival joins the waiting queue and wakes an idle engine.
                add(ordered[i])
                i += 1
                if kind == _IDLE:
                    kind, at_s = STEP_START, arrival_s
                arrival_s = ordered[i].arrival_s if i < count else INF
            else:
                break
    world.steps = steps
    world.busy_s = busy_s
    return world


def decode_ends(world: World, start_s: float, limit: int) -> list[float]:
    """End times of up to `limit` pure-decode steps from `start_s`; a step is included only if it
    starts before the next queued event (the first always is)."""
    running = world.scheduler.running
    n = len(running)
    context = 0
    for r in running:
        context += r.num_computed
    cost = world.cost
    # Step j has context C + n*j and C + n*(j+1) attention pairs: both roofline terms are affine in
    # j (the same arithmetic as `StepCost.time`, unrolled for speed).
    compute0 = n * (cost.flops_per_token + cost.flops_per_sample) / cost.flop_s + (
        (context + n) * cost.flops_per_pair / cost.attention_flop_s
    )
    compute_step = n * cost.flops_per_pair / cost.attention_flop_s
    memory0 = (cost.fixed_bytes + n * cost.bytes_per_token + context * cost.bytes_per_context) / cost.byte_s
    memory_step = n * cost.bytes_per_context / cost.byte_s
    overhead = cost.step_overhead_s + cost.seq_overhead_s * n
    horizon = world.next_event_s
    # Durations never shrink (both slopes are >= 0), so no more than (horizon - start) / first
    # duration steps start before the horizon: compute that many (and a margin), then cut.
    first = (compute0 if compute0 > memory0 else memory0) + overhead
    count = limit
    if horizon != INF:
        count = min(limit, int((horizon - start_s) / first) + 2)
    ends = _accumulated(start_s, count, compute0, compute_step, memory0, memory_step, overhead)
    # Step j starts at ends[j-1]: keep steps up to the first that ends at or after the horizon.
    cut = bisect.bisect_left(ends, horizon) + 1
    while cut > len(ends) and len(ends) < limit:  # the estimate fell short (rounding): go on
        more = _accumulated(
            ends[-1],
            limit - len(ends),
            compute0 + compute_step * len(ends),
            compute_step,
            memory0 + memory_step * len(ends),
            memory_step,
            overhead,
        )
        ends.extend(more[: bisect.bisect_left(more, horizon) + 1])
        cut = bisect.bisect_left(ends, horizon) + 1
    if cut < len(ends):
        del ends[cut:]
    return ends


def _accumulated(
    start_s: float,
    count: int,
    compute0: float,
    compute_step: float,
    memory0: float,
    memory_step: float,
    overhead: float,
) -> list[float]:
    """Running sums from `start_s` of `count` step times max(compute0 + compute_step*j,
    memory0 + memory_step*j) + overhead. The two lines cross at most once: when one is clearly above
    the other at both ends it is the maximum throughout, and the branch is dropped."""
    last = count - 1
    c_end, m_end = compute0 + compute_step * last, memory0 + memory_step * last
    margin = 1e-9
    if compute0 > memory0 * (1 + margin) and c_end > m_end * (1 + margin):
        steps = [compute0 + compute_step * j + overhead for j in range(count)]
    elif memory0 > compute0 * (1 + margin) and m_end > c_end * (1 + margin):
        steps = [memory0 + memory_step * j + overhead for j in range(count)]
    else:
        steps = []
        for j in range(count):
            compute = compute0 + compute_step * j
            memory = memory0 + memory_step * j
            steps.append((compute if compute > memory else memory) + overhead)
    steps[0] += start_s  # the running sums from start_s, as start_s + d0 + d1 + ... in that order
    return list(itertools.accumulate(steps))


def plan_time(cost: StepCost, plan: StepPlan) -> float:
    """Seconds the planned step takes (its shape is read before `complete` advances anything)."""
    tokens = samples = context = 0
    pairs = 0.0
    for request, n in zip(plan.requests, plan.tokens, strict=True):
        c = request.num_computed
        tokens += n
        context += c
        pairs += n * c + n * (n + 1) * 0.5
        if c + n == request.prompt_tokens + request.output_tokens:
            samples += 1
    return cost.time(tokens=tokens, samples=samples, pairs=pairs, context=context, seqs=len(plan.tokens))


class EventQueue:
    """A heap of events keyed by `(time_s, priority, sequence)`; `sequence` counts pushes."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Event]] = []
        self._sequence = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, event: Event) -> None:
        heapq.heappush(self._heap, (event.time_s, event.priority, self._sequence, event))
        self._sequence += 1

    def extend(self, events: Iterable[Event]) -> None:
        """Push many events (one heapify instead of a push each)."""
        heap = self._heap
        for event in events:
            heap.append((event.time_s, event.priority, self._sequence, event))
            self._sequence += 1
        heapq.heapify(heap)

    def pop(self) -> Event:
        return heapq.heappop(self._heap)[3]

    def key_of_next(self) -> tuple[float, int, int]:
        """The key of the event `pop` would return."""
        time_s, priority, sequence, _ = self._heap[0]
        return time_s, priority, sequence


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: a simulation makes many short-lived objects and no
    reference cycles, and the collector would only rescan the large set of live requests again and
    again (a third of the run time, measured)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
