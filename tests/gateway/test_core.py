"""The pure core: weighted choice, route tables, prefix hashes, payloads, records, the spool file."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from evertune.errors import InvalidArgument
from evertune.gateway.prefix import chain_hashes, chat_messages, completion_prompt, endpoint_key
from evertune.gateway.publisher import Pending, Spool, group_batches, hash_prompts, read_spool, subject_of
from evertune.gateway.record import Observation, build_record, client_request_id, error_type, read_payload
from evertune.gateway.routing import NoDeployment, RouteBook, choose, parse_table, upstream_model
from evertune.v1 import endpoint_pb2, telemetry_pb2


def _table(*weights: int) -> endpoint_pb2.RouteTable:
    routes = [
        endpoint_pb2.Route(deployment_id=f"d{i}", upstream_url=f"http://u{i}", weight=w)
        for i, w in enumerate(weights)
    ]
    return endpoint_pb2.RouteTable(endpoint="ep", routes=routes)


def test_choose_follows_the_weights() -> None:
    rng = random.Random(7)
    table = _table(7000, 2000, 1000, 0)
    counts = Counter(choose(table, rng).deployment_id for _ in range(20_000))
    assert abs(counts["d0"] / 20_000 - 0.7) < 0.015
    assert abs(counts["d1"] / 20_000 - 0.2) < 0.015
    assert abs(counts["d2"] / 20_000 - 0.1) < 0.015
    assert counts["d3"] == 0


def test_choose_without_weight_is_no_deployment() -> None:
    with pytest.raises(NoDeployment):
        choose(_table(), random.Random(0))
    with pytest.raises(NoDeployment):
        choose(_table(0, 0), random.Random(0))


def test_route_book_put_replace_delete() -> None:
    book = RouteBook()
    book.put("ep", _table(1).SerializeToString())
    first = book.tables["ep"]
    book.put("ep", _table(1, 2).SerializeToString())
    assert len(first.routes) == 1 and len(book.tables["ep"].routes) == 2  # a chosen table is not changed
    assert book.endpoints() == ["ep"]
    book.put("ep", None)
    assert "ep" not in book.tables
    with pytest.raises(InvalidArgument):
        parse_table("bad", b"\xff\xff\xff")
    assert parse_table("named-by-key", b"").endpoint == "named-by-key"
    route = _table(1).routes[0]
    assert (
        upstream_model(route, "ep", "endpoint") == "ep" and upstream_model(route, "ep", "deployment") == "d0"
    )


def test_route_book_dates_an_endpoint_from_its_first_table() -> None:
    book = RouteBook()
    written = _table(1)
    written.update_time.seconds = 1_700_000_000
    book.put("ep", written.SerializeToString(), now_s=1_800_000_000)
    book.put("ep", _table(1, 2).SerializeToString(), now_s=1_900_000_000)  # a later change keeps it
    book.put("undated", _table(1).SerializeToString(), now_s=1_800_000_000.7)
    assert (book.created("ep"), book.created("undated"), book.created("nope")) == (
        1_700_000_000,
        1_800_000_000,
        0,
    )
    book.put("ep", None)
    book.put("ep", _table(1).SerializeToString(), now_s=2_000_000_000)  # deleted, then made again
    assert book.created("ep") == 2_000_000_000


def test_error_types_and_client_request_ids() -> None:
    assert [error_type(s) for s in (400, 404, 413, 429, 500, 502, 503, 504)] == [
        *["invalid_request_error"] * 3,
        "rate_limit_error",
        *["server_error"] * 4,
    ]
    assert client_request_id("call-7:turn/3") == "call-7:turn/3"
    assert [client_request_id(v) for v in (None, "", "a b", "é", "x" * 129, "ok\n")] == [None] * 6
    assert client_request_id("x" * 128) == "x" * 128


def test_prefix_chain() -> None:
    key = endpoint_key(b"secret", "ep")
    tokens = list(range(300))
    hashes = chain_hashes(key, tokens, 128)
    assert len(hashes) == 2  # the partial third block does not count
    assert all(0 <= h < 2**64 for h in hashes)
    assert chain_hashes(key, [*tokens[:128], 9999, *tokens[129:]], 128)[0] == hashes[0]
    assert chain_hashes(key, [*tokens[:128], 9999, *tokens[129:]], 128)[1] != hashes[1]
    assert chain_hashes(key, [0, *tokens[1:]], 128)[1] != hashes[1] or tokens[0] == 0
    assert chain_hashes(endpoint_key(b"secret", "other"), tokens, 128)[0] != hashes[0]
    assert chain_hashes(key, tokens[:100], 128) == []


def test_prompts() -> None:
    parts = [{"type": "text", "text": "h"}, {"type": "image_url"}, {"type": "text", "text": "i"}]
    assert chat_messages([{"role": "user", "content": parts}, "junk"]) == [{"role": "user", "content": "hi"}]
    assert chat_messages("nope") is None
    assert completion_prompt("abc") == "abc"
    assert completion_prompt([1, 2, 3]) == [1, 2, 3]
    assert completion_prompt(["first", "second"]) == "first"
    assert completion_prompt(None) is None


def test_hash_prompts_fills_hashes_and_drops_the_prompt() -> None:
    items = [
        Pending(record=telemetry_pb2.RequestRecord(endpoint="ep"), prompt=list(range(256))),
        Pending(record=telemetry_pb2.RequestRecord(endpoint="ep"), prompt=None),
    ]
    hash_prompts(items, None, b"s", 128)
    assert len(items[0].record.prefix_hashes) == 2 and items[0].record.prefix_block_tokens == 128
    assert items[0].prompt is None and not items[1].record.prefix_hashes


def test_read_payload() -> None:
    assert read_payload("[DONE]").done
    assert read_payload('{"choices": [{"delta": {"content": "x"}}]}').content
    assert not read_payload('{"choices": [{"delta": {"role": "assistant", "content": ""}}]}').content
    usage = read_payload('{"choices": [], "usage": {"prompt_tokens": 3}}')
    assert usage.usage_only and usage.usage == {"prompt_tokens": 3}
    assert read_payload('{"error": {"message": "boom"}}').error
    assert read_payload("not json") == read_payload("[1]")


def test_build_record_times_and_no_text() -> None:
    obs = Observation(
        request_id="r", reply_id="r", start_time_unix_ns=1, received=10.0, stream=True, model="m" * 500
    )
    obs.upstream_sent, obs.upstream_first = 10.001, 10.050
    obs.writes = [10.052, 10.062, 10.075]
    obs.ended = 10.080
    record = build_record(obs)
    assert record.ttft_ms == pytest.approx(52.0)
    assert list(record.itl_ms) == pytest.approx([10.0, 13.0], abs=1e-3)
    assert record.e2e_ms == pytest.approx(80.0)
    assert record.upstream_ttft_ms == pytest.approx(49.0)
    assert record.model == ""  # it named no endpoint: not kept
    obs.endpoint = "m" * 500
    assert len(build_record(obs).model) == 200


def test_spool_round_trip(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.bin", max_bytes=1 << 20)
    records = [telemetry_pb2.RequestRecord(request_id=str(i), endpoint=f"e{i % 2}") for i in range(5)]
    batches = group_batches(records, "test", max_bytes=1 << 20)
    assert [len(b.records) for b in batches] == [3, 2]
    spool.append(batches)
    with (tmp_path / "spool.bin").open("ab") as f:
        f.write(b"\x00\x00\x01\x00torn")  # a crash mid-write
    assert spool.has_data()
    taken = list(spool.take())
    assert [batch for _, batch in taken] == batches
    spool.append([batches[0]])  # spilled while draining
    assert spool.done(taken[0][0]) == 0  # the first batch was published; the second goes back
    assert sorted(len(b.records) for b in read_spool((tmp_path / "spool.bin").read_bytes())) == [2, 3]
    assert not spool.draining.exists()
    assert subject_of("") == "evertune.telemetry._unrouted"
