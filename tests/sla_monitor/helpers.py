"""Test helpers of the SLA monitor: telemetry as the gateway publishes it."""

from __future__ import annotations

import time
import uuid

from evertune.v1 import telemetry_pb2


def record_batch(endpoint: str, *, ttft_ms: float, n: int = 20) -> telemetry_pb2.RequestRecordBatch:
    """`n` streamed requests of `endpoint` that just ended, each with `ttft_ms` and 20 gaps of 10 ms."""
    now_ns = time.time_ns()
    records = [
        telemetry_pb2.RequestRecord(
            request_id=uuid.uuid4().hex,
            endpoint=endpoint,
            deployment="dep-a",
            start_time_unix_ns=now_ns - int((ttft_ms + 200) * 1e6),
            status_code=200,
            stream=True,
            ttft_ms=ttft_ms,
            e2e_ms=ttft_ms + 200,
            itl_ms=[10.0] * 20,
            completion_tokens=21,
        )
        for _ in range(n)
    ]
    return telemetry_pb2.RequestRecordBatch(records=records, batch_id=uuid.uuid4().hex, source="test")
