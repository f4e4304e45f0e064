"""The discrete-event simulation around the scheduler: arrivals and engine steps in simulated time.

Every event has a time and a fixed priority; `fire(world)` applies it and returns its follow-up
events. The queue orders events by the explicit key `(time_s, priority, sequence)`:

- `StepEnd` (priority 0) before `Arrival` (1) before `StepStart` (2) at the same time: a step that
  ends at t delivers its tokens first, a request arriving at exactly t still joins the step that
  starts at t (as in vLLM, where the next `schedule()` runs after the step's outputs are processed
  and sees whatever was added meanwhile);
- among equal (time, priority), the order they were pushed (`sequence`, a counter).

One engine: at most one step is in flight, and a `StepStart` is pending only while none is.
Arrivals come one at a time (each arrival's follow-up is the next one), in arrival order; equal
arrival times keep the workload's order.

Fast-forward: when the next steps are pure decodes (nothing waits, every running request has one
token to compute, blocks suffice; `Scheduler.decode_limit`), `StepStart` plans them all at once,
up to the last step that starts before the next pending event (an arrival at exactly a step's
start joins that step, so it ends the stretch), and one `StretchEnd` applies them. Step times are
computed step by step as before, so results equal the one-step-at-a-time run (tested); the saving
is the per-request work of every step.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from evertune.perfmodel.scheduler import Scheduler, SimRequest, StepPlan
from evertune.perfmodel.steptime import StepCost

STEP_END = 0
ARRIVAL = 1
STEP_START = 2


class Event(Protocol):
    """Something that happens at `time_s`; `fire` returns the events it causes."""

    priority: ClassVar[int]  #: tie-break at equal times: lower first

    @property
    def time_s(self) -> float: ...

    def fire(self, world: World) -> list[Event]: ...


@dataclass
class World:
    """The simulated engine: its scheduler, its step cost, and what the event loop needs to know."""

    scheduler: Scheduler  #: vLLM's scheduler and block pool
    cost: StepCost  #: step time model
    busy: bool = False  #: a step is in flight
    start_pending: bool = False  #: a `StepStart` is queued
    steps: int = 0  #: steps run
    busy_s: float = 0.0  #: simulated seconds spent in steps
    finished: list[SimRequest] = field(default_factory=list)  #: requests that finished, in order
    fast_forward: bool = True  #: apply runs of pure-decode steps at once (see the module doc)
    next_event_s: float = float("inf")  #: time of the earliest queued event (set by `run`)

    def wake(self, now_s: float) -> list[Event]:
        """A `StepStart` now, unless a step runs or one is already queued."""
        if self.busy or self.start_pending:
            return []
        self.start_pending = True
        return [StepStart(now_s)]


class Arrival:
    """The `index`-th request (of requests sorted by arrival) reaches the engine: it joins the
    waiting queue and wakes an idle engine; its follow-up is the next request's arrival, so the
    queue holds one arrival at a time, not the whole workload."""

    __slots__ = ("index", "requests", "time_s")
    priority: ClassVar[int] = ARRIVAL

    def __init__(self, requests: Sequence[SimRequest], index: int) -> None:
        self.requests = requests
        self.index = index
        self.time_s = requests[index].arrival_s

    def fire(self, world: World) -> list[Event]:
        world.scheduler.add(self.requests[self.index])
        follow = world.wake(self.time_s)
        if self.index + 1 < len(self.requests):
            follow.append(Arrival(self.requests, self.index + 1))
        return follow


class StepStart:
    """The engine plans a step; an empty plan leaves it idle until the next arrival."""

    __slots__ = ("time_s",)
    priority: ClassVar[int] = STEP_START

    def __init__(self, time_s: float) -> None:
        self.time_s = time_s

    def fire(self, world: World) -> list[Event]:
        world.start_pending = False
        if world.fast_forward:
            limit = world.scheduler.decode_limit()
            if limit > 1:
                ends = decode_ends(world, self.time_s, limit)
                world.busy = True
                world.steps += len(ends)
                world.busy_s += ends[-1] - self.time_s
                return [StretchEnd(ends)]
        plan = world.scheduler.schedule(self.time_s)
        if not plan.requests:
            return []
        duration = plan_time(world.cost, plan)
        world.busy = True
        world.steps += 1
        world.busy_s += duration
        return [StepEnd(self.time_s + duration, plan)]


class StepEnd:
    """A step ends: its tokens are sampled, finished requests leave, and the next step is planned."""

    __slots__ = ("plan", "time_s")
    priority: ClassVar[int] = STEP_END

    def __init__(self, time_s: float, plan: StepPlan) -> None:
        self.time_s = time_s
        self.plan = plan

    def fire(self, world: World) -> list[Event]:
        world.busy = False
        world.finished.extend(world.scheduler.complete(self.plan, self.time_s))
        if world.scheduler.has_work:
            return world.wake(self.time_s)
        return []


class StretchEnd:
    """A run of pure-decode steps ends (see the module doc)."""

    __slots__ = ("ends", "time_s")
    priority: ClassVar[int] = STEP_END

    def __init__(self, ends: list[float]) -> None:
        self.time_s = ends[-1]
        self.ends = ends

    def fire(self, world: World) -> list[Event]:
        world.busy = False
        world.finished.extend(world.scheduler.complete_decodes(self.ends))
        if world.scheduler.has_work:
            return world.wake(self.time_s)
        return []


def decode_ends(world: World, start_s: float, limit: int) -> list[float]:
    """End times of up to `limit` pure-decode steps from `start_s`; a step is included only if it
    starts before the next queued event (the first always is)."""
    running = world.scheduler.running
    n = len(running)
    context = sum(r.num_computed for r in running)
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
    ends: list[float] = []
    t = start_s
    horizon = world.next_event_s
    for j in range(limit):
        if j and t >= horizon:
            break
        compute = compute0 + compute_step * j
        memory = memory0 + memory_step * j
        t += (compute if compute > memory else memory) + overhead
        ends.append(t)
    return ends


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


def run(world: World, requests: Iterable[SimRequest]) -> World:
    """Simulate `requests` (each arrives at its `arrival_s`) until no event is left."""
    with paused_gc():
        queue = EventQueue()
        ordered = sorted(requests, key=lambda r: r.arrival_s)
        if ordered:
            queue.push(Arrival(ordered, 0))
        while queue:
            event = queue.pop()
            world.next_event_s = queue.key_of_next()[0] if queue else float("inf")
            for follow in event.fire(world):
                queue.push(follow)
    return world


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
