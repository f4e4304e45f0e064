"""rows_of: every field of a record becomes its column; no text ever."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from evertune.infra.bus import PoisonMessage
from evertune.profiler.sink import COLUMNS, decode, group_token, rows_of
from evertune.v1 import telemetry_pb2
from tests.profiler.helpers import BASE_NS, batch, record


def test_rows_of_converts_every_field() -> None:
    rec = record(
        0,
        start_time_unix_ns=BASE_NS + 123_456_789,
        api=telemetry_pb2.API_COMPLETIONS,
        stream=False,
        status_code=502,
        error_class="upstream_5xx",
        client_disconnected=True,
        endpoint_uid="ep-0123456789abcdef01234567",
    )
    [row] = rows_of(telemetry_pb2.RequestRecordBatch(records=[rec], batch_id="b"))
    assert dict(zip(COLUMNS, row, strict=True)) == {
        "endpoint": "voice",
        "endpoint_uid": "ep-0123456789abcdef01234567",
        "deployment": "d-a",
        "request_id": "r-0",
        "ts": datetime.fromtimestamp(BASE_NS // 1_000_000_000, UTC) + timedelta(microseconds=123_456),
        "api": "completions",
        "model": "tiny",
        "stream": False,
        "status_code": 502,
        "error_class": "upstream_5xx",
        "ttft_ms": 100.0,
        "e2e_ms": 300.0,
        "upstream_ttft_ms": 99.0,
        "itl_ms": [10.0, 12.0],
        "prompt_tokens": 500,
        "cached_tokens": 100,
        "completion_tokens": 3,
        "prefix_hashes": [2**64 - 1, 7],
        "client_disconnected": True,
    }


@pytest.mark.parametrize(
    ("api", "name"),
    [(telemetry_pb2.API_CHAT, "chat"), (telemetry_pb2.API_COMPLETIONS, "completions"), (0, "")],
)
def test_api_names(api: int, name: str) -> None:
    [row] = rows_of(telemetry_pb2.RequestRecordBatch(records=[record(0, api=api)]))
    assert row[COLUMNS.index("api")] == name


def test_no_text_columns() -> None:
    # Only identifiers and labels are strings; nothing that could carry prompt or completion text.
    assert {"prompt", "completion", "text", "messages", "content"}.isdisjoint(COLUMNS)
    [row] = rows_of(batch(0, 1))
    strings = {c for c, v in zip(COLUMNS, row, strict=True) if isinstance(v, str)}
    assert strings == {"endpoint", "endpoint_uid", "deployment", "request_id", "api", "model", "error_class"}


def test_rows_keep_record_order() -> None:
    rows = rows_of(batch(0, 5))
    assert [r[COLUMNS.index("request_id")] for r in rows] == [f"r-{i}" for i in range(5)]


def test_decode_rejects_garbage_as_poison() -> None:
    assert decode(batch(0, 2).SerializeToString()).records[1].request_id == "r-1"
    with pytest.raises(PoisonMessage, match="undecodable RequestRecordBatch"):
        decode(b"\xff\xff\xff\xff not a protobuf")


def test_group_token_depends_on_ids_and_order() -> None:
    assert group_token(["a", "b"]) == group_token(["a", "b"])
    assert group_token(["a", "b"]) != group_token(["b", "a"])
    assert group_token(["a"]) != group_token(["a", "b"])
