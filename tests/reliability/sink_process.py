"""The telemetry sink in a process of its own, for the kill tests (run with `python -m`).

    python -m tests.reliability.sink_process --nats URL --store chdb:///dir --database D \
        --subject S --durable DUR --mode die|finish [--expect-messages N]

`die`: runs `TelemetrySink`; right after its first insert returns (rows written to ClickHouse), and
before it acks anything, the process SIGKILLs itself: a crash at the worst moment. It prints one
JSON line `{"inserted_rows": n}` first.
`finish`: runs `TelemetrySink` until the durable consumer has nothing pending or unacked and
`--expect-messages` messages were taken, then prints one JSON line of the table's counts and the
sink's stats, and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from evertune.infra.bus import connect
from evertune.infra.store import QueryResult, Store, migrate, open_store
from evertune.infra.store.client import Parameters
from evertune.profiler.sink import TABLE, SinkConfig, TelemetrySink


class DiesAfterInsert(Store):
    """A store whose first insert is carried out, then the process is killed (SIGKILL)."""

    def __init__(self, inner: Store) -> None:  # delegates; the inner store holds the engine
        self._inner = inner

    async def query(self, sql: str, parameters: Parameters = None) -> QueryResult:
        return await self._inner.query(sql, parameters)

    async def insert(
        self, table: str, rows: Sequence[Sequence[Any]], column_names: Sequence[str], *, dedup_token: str
    ) -> None:
        await self._inner.insert(table, rows, column_names, dedup_token=dedup_token)
        print(json.dumps({"inserted_rows": len(rows)}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


async def main(args: argparse.Namespace) -> int:
    nc = await connect(args.nats, name=f"sink-{args.mode}")
    store = await open_store(args.store, database=args.database)
    await migrate(store)
    js = nc.jetstream()
    config = SinkConfig(
        durable=args.durable,
        filter_subject=args.subject,
        flush_ms=300.0,
        batch_rows=100_000,
        ack_wait_s=1.0,
        backoff_s=(0.2,),
    )
    sink = TelemetrySink(js, DiesAfterInsert(store) if args.mode == "die" else store, config)
    stop = asyncio.Event()
    task = asyncio.create_task(sink.run(stop))
    deadline = time.monotonic() + args.timeout_s
    try:
        while True:
            assert time.monotonic() < deadline, "the sink did not finish in time"
            await asyncio.sleep(0.1)
            taken = sink.stats.messages_acked + sink.stats.poisoned
            if args.mode != "finish" or taken < args.expect_messages:
                continue
            info = await js.consumer_info(config.stream, config.durable)
            if info.num_pending == 0 and info.num_ack_pending == 0:
                break
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    rows, distinct = (await store.query(f"SELECT count(), uniqExact(request_id) FROM {TABLE}"))[0]
    print(json.dumps({"rows": int(rows), "distinct": int(distinct), "stats": asdict(sink.stats)}), flush=True)
    await store.close()
    await nc.close()
    return 0


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nats", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--subject", required=True)
    parser.add_argument("--durable", required=True)
    parser.add_argument("--mode", choices=("die", "finish"), required=True)
    parser.add_argument("--expect-messages", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=20.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
