"""`evertune bench bus`: how fast Python can put telemetry on JetStream, three ways, in one run.

- one awaited publish at a time (the latency-bound floor);
- many publishes in flight (what a busy gateway can do per record);
- records batched several hundred to a message (what the telemetry path uses).
Each is repeated; medians are reported, and the batched/awaited ratio is the headline.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from nats.js import JetStreamContext

from evertune.apps.benchmarks import Figures
from evertune.apps.benchmarks.scratch import scratch_bus
from evertune.infra.bus import publish

PAYLOAD = b"x" * 300  # about one telemetry record
BATCH_RECORDS = 500


async def _awaited(js: JetStreamContext, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await publish(js, "evertune.telemetry.bench", PAYLOAD, msg_id=uuid.uuid4().hex)
    return n / (time.perf_counter() - start)


async def _in_flight(js: JetStreamContext, n: int, window: int = 1000) -> float:
    start = time.perf_counter()
    for offset in range(0, n, window):
        await asyncio.gather(
            *(
                publish(js, "evertune.telemetry.bench", PAYLOAD, msg_id=uuid.uuid4().hex)
                for _ in range(min(window, n - offset))
            )
        )
    return n / (time.perf_counter() - start)


async def _batched(js: JetStreamContext, messages: int) -> float:
    body = PAYLOAD * BATCH_RECORDS
    start = time.perf_counter()
    for _ in range(messages):
        await publish(js, "evertune.telemetry.bench", body, msg_id=uuid.uuid4().hex)
    return messages * BATCH_RECORDS / (time.perf_counter() - start)


async def run(quick: bool) -> Figures:
    n, repeats = (500, 3) if quick else (3000, 5)
    async with scratch_bus("evertune-bench-bus") as bus:
        awaited, in_flight, batched = [], [], []
        for _ in range(repeats):
            awaited.append(await _awaited(bus.js, n))
            in_flight.append(await _in_flight(bus.js, n * 2))
            batched.append(await _batched(bus.js, max(20, n // 25)))
    figures: Figures = {
        "benchmark": "bus",
        "repeats": repeats,
        "awaited_msgs_per_s": round(statistics.median(awaited)),
        "in_flight_msgs_per_s": round(statistics.median(in_flight)),
        "batched_records_per_s": round(statistics.median(batched)),
        "records_per_batch": BATCH_RECORDS,
    }
    figures["batched_vs_awaited_ratio"] = round(
        figures["batched_records_per_s"] / figures["awaited_msgs_per_s"], 1
    )
    return figures
