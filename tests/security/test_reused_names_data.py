"""A re-created endpoint name inherits none of the earlier endpoint's data (hole 3 of the security
issue, beyond WatchEvents): every endpoint has an immutable id (`Endpoint.uid`, new at every
CreateEndpoint); the gateway stamps it on each telemetry row and keys the prefix hashes with it.

Through the real loop (NATS, the gateway, the profiler's sink into chDB, the deployer with sim
engines): an endpoint "foo" serves a prompt, is deleted, and "foo" is created again and serves the
same prompt. The two endpoints' ids differ, the rows say which one served them, and the same
prompt's prefix hashes differ between them (before ids, both were keyed by the name: equal hashes
let the new owner recognise the old owner's prompts); the name's profile is built from the new
endpoint's requests only."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import grpc
import pytest

from evertune.apps.harness.waiting import eventually
from evertune.domain.replay import RequestResult, replay
from evertune.domain.workloads.plan import ChatMessage, PlannedRequest
from evertune.infra.store import Store
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from tests.reliability.helpers import wait_rows
from tests.reliability.loop import Loop, create_endpoint, running_loop, sim_spec

pytestmark = pytest.mark.reliability

#: A system prompt of several 128-token blocks, the same for both endpoints.
SYSTEM = " ".join(f"Rule {i}: answer in one short sentence and name the caller's account." for i in range(60))


def _plan(n: int, prefix: str) -> list[PlannedRequest]:
    messages = (ChatMessage("system", SYSTEM), ChatMessage("user", "What is my balance?"))
    return [
        PlannedRequest(at_s=i * 0.05, request_id=f"{prefix}-{i}", api="chat", max_tokens=2, messages=messages)
        for i in range(n)
    ]


async def _serve(loop: Loop, name: str, n: int) -> D.Endpoint:
    """Create `name`, wait until the gateway routes it, send `n` requests; the endpoint."""
    await create_endpoint(loop.stub, sim_spec(name, loop.model_dir))
    endpoint: D.Endpoint = (await loop.stub.GetEndpoint(pb.GetEndpointRequest(name=name))).endpoint
    book = loop.stack.gateway.book
    await eventually(
        lambda: name in book.tables and book.tables[name].endpoint_uid == endpoint.uid,
        timeout_s=10,
        what="the gateway routes the endpoint",
    )
    results: list[RequestResult] = []
    await replay(
        _plan(n, uuid.uuid4().hex[:8]), target=loop.stack.gateway_url, model=name, on_result=results.append
    )
    assert [r.status for r in results] == [200] * n
    return endpoint


async def _delete(loop: Loop, endpoint: D.Endpoint) -> None:
    name = endpoint.spec.name
    await loop.stub.DeleteEndpoint(pb.DeleteEndpointRequest(name=name, expected_revision=endpoint.revision))

    async def gone() -> bool:
        try:
            await loop.stub.GetEndpoint(pb.GetEndpointRequest(name=name))
        except grpc.aio.AioRpcError as err:
            return bool(err.code() == grpc.StatusCode.NOT_FOUND)
        return False

    await eventually(gone, timeout_s=30, what=f"{name} deleted")


async def _rows_by_uid(store: Store, name: str) -> dict[str, tuple[int, set[int]]]:
    """endpoint_uid -> (rows, the distinct first prefix hashes of its rows)."""
    rows = await store.query(
        "SELECT endpoint_uid, count(), groupUniqArray(prefix_hashes[1]) FROM requests "
        "WHERE endpoint = {e:String} GROUP BY endpoint_uid",
        {"e": name},
    )
    return {str(uid): (int(n), {int(h) for h in firsts}) for uid, n, firsts in rows}


async def test_a_re_created_name_gets_a_new_id_and_shares_no_rows_or_prefix_key(
    store_url: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    name = f"reused-{uuid.uuid4().hex[:6]}"
    async with running_loop(tmp_path, store_url=store_url, model_dir=tokenizer_dir) as loop:
        first = await _serve(loop, name, 4)
        await wait_rows(loop.store, name, 4, timeout_s=30)
        await _delete(loop, first)
        second = await _serve(loop, name, 3)
        await wait_rows(loop.store, name, 7, timeout_s=30)

        assert first.uid.startswith("ep-") and second.uid.startswith("ep-")
        assert first.uid != second.uid  # the name is the same, the endpoint is not
        by_uid = await _rows_by_uid(loop.store, name)
        assert set(by_uid) == {first.uid, second.uid}
        assert by_uid[first.uid][0] == 4 and by_uid[second.uid][0] == 3
        old_hashes, new_hashes = by_uid[first.uid][1], by_uid[second.uid][1]
        assert len(old_hashes) == 1 and len(new_hashes) == 1  # one prompt: one chain per endpoint
        assert 0 not in old_hashes  # the prompt is long enough to be hashed at all
        assert old_hashes != new_hashes  # the same prompt, unrecognisable across the two endpoints

        # the name's profile is the new endpoint's, of its own requests only
        request = {"endpoint": name, "action": "build", "window_s": 3600}
        reply = await loop.stack.profiler.handle_request(json.dumps(request).encode())
        assert reply["endpoint_uid"] == second.uid and reply["stored"]["endpoint_uid"] == second.uid
        assert reply["stored"]["trace_lines"] == 3, reply["stored"]["trace_lines"]
