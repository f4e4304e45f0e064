"""`evertune bench store`: telemetry rows into chDB, and the per-minute percentile query.

Figures: rows/s inserting `requests` rows in batches (median of repeats), the same batch re-sent
with its dedup token (what a retry costs and that it stores nothing), and the latency of a
per-minute p50/p99 TTFT query over everything inserted.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from evertune.apps.benchmarks import Figures
from evertune.infra.store import Store, migrate, open_store
from evertune.profiler.sink import COLUMNS

PERCENTILES_SQL = """
SELECT toStartOfMinute(ts) AS minute, deployment,
       quantileTDigest(0.5)(ttft_ms) AS p50, quantileTDigest(0.99)(ttft_ms) AS p99, count() AS n
FROM requests WHERE endpoint = {endpoint:String}
GROUP BY minute, deployment ORDER BY minute, deployment
"""


def _rows(rng: random.Random, n: int, start: datetime) -> list[list[Any]]:
    rows = []
    for i in range(n):
        ttft = rng.lognormvariate(4.5, 0.5)
        tokens = rng.randint(5, 60)
        rows.append(
            [
                "voice-demo",
                rng.choice(("d-stable", "d-canary")),
                uuid.uuid4().hex,
                start + timedelta(milliseconds=20 * i),
                "chat.completions",
                "evertune-tiny",
                True,
                200,
                "",
                ttft,
                ttft + tokens * 12.0,
                ttft - 0.8,
                [rng.uniform(8, 20) for _ in range(tokens - 1)],
                rng.randint(400, 3000),
                rng.randint(0, 2000),
                tokens,
                [rng.getrandbits(64) for _ in range(rng.randint(5, 40))],
                False,
            ]
        )
    return rows


async def _measure(store: Store, quick: bool) -> Figures:
    rng = random.Random(7)
    batch, repeats = (2_000, 3) if quick else (20_000, 5)
    start = datetime.now(UTC).replace(microsecond=0)
    insert_rates, retry_s = [], []
    for r in range(repeats):
        rows = _rows(rng, batch, start + timedelta(seconds=r * batch * 0.02))
        token = uuid.uuid4().hex
        t0 = time.perf_counter()
        await store.insert("requests", rows, COLUMNS, dedup_token=token)
        insert_rates.append(batch / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        await store.insert("requests", rows, COLUMNS, dedup_token=token)
        retry_s.append(time.perf_counter() - t0)
    stored = (await store.query("SELECT count() FROM requests")).scalar()
    query_ms = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        await store.query(PERCENTILES_SQL, {"endpoint": "voice-demo"})
        query_ms.append((time.perf_counter() - t0) * 1000)
    return {
        "benchmark": "store",
        "repeats": repeats,
        "batch_rows": batch,
        "insert_rows_per_s": round(statistics.median(insert_rates)),
        "retried_batch_s": round(statistics.median(retry_s), 4),
        "rows_sent": batch * repeats * 2,
        "rows_stored": int(stored),
        "percentile_query_ms": round(statistics.median(query_ms), 2),
    }


async def run(quick: bool) -> Figures:
    with tempfile.TemporaryDirectory(prefix="evertune-bench-") as tmp:
        store = await open_store(f"chdb://{tmp}/clickhouse", database="bench")
        try:
            await migrate(store)
            return await _measure(store, quick)
        finally:
            await store.close()
