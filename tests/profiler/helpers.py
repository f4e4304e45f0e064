"""Records, batches and waiting, shared by the profiler tests."""

from __future__ import annotations

import time
import uuid
from typing import Any

from evertune.v1 import telemetry_pb2

#: A whole hour of yesterday (UTC), in ns: recent, since the requests table drops rows after 30
#: days (TTL), and on an hour boundary, so minute buckets start at it.
BASE_NS = (int(time.time()) // 3600 - 24) * 3600 * 1_000_000_000


def record(
    i: int, *, endpoint: str = "voice", deployment: str = "d-a", **fields: Any
) -> telemetry_pb2.RequestRecord:
    """A complete record numbered `i`; `fields` override any field."""
    values: dict[str, Any] = {
        "request_id": f"r-{i}",
        "endpoint": endpoint,
        "deployment": deployment,
        "start_time_unix_ns": BASE_NS + i * 1_000_000,
        "api": telemetry_pb2.API_CHAT,
        "model": "tiny",
        "stream": True,
        "status_code": 200,
        "error_class": "",
        "ttft_ms": 100.0 + i,
        "e2e_ms": 300.0 + i,
        "upstream_ttft_ms": 99.0 + i,
        "itl_ms": [10.0, 12.0],
        "prompt_tokens": 500 + i,
        "cached_tokens": 100,
        "completion_tokens": 3,
        "prefix_hashes": [2**64 - 1, 7],
        "client_disconnected": False,
        "prefix_block_tokens": 16,
    }
    values.update(fields)
    return telemetry_pb2.RequestRecord(**values)


def batch(first: int, n: int, **fields: Any) -> telemetry_pb2.RequestRecordBatch:
    """Records `first` .. `first + n - 1` in one batch with a fresh id."""
    return telemetry_pb2.RequestRecordBatch(
        records=[record(i, **fields) for i in range(first, first + n)],
        batch_id=f"b-{uuid.uuid4().hex}",
        source="tests",
    )
