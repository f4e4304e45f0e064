"""`EndpointClient` against a running deployer: the calls, the token, the errors."""

from __future__ import annotations

import grpc
import pytest

from evertune.client import Connection, EndpointClient, RpcError
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from tests.deployer.conftest import TOKEN_A, TOKEN_B, Stack
from tests.deployer.helpers import new_name, spec
from tests.deployer.test_api import endpoint_in


async def test_an_endpoints_life_through_the_client(stack: Stack) -> None:
    name = new_name()
    async with EndpointClient(Connection(address=stack.address, token=TOKEN_A)) as client:
        created = await client.create(spec(name, max_num_seqs=8))
        assert created.spec.name == name and created.spec.tenant == "tenant-a"
        await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
        assert (await client.get(name)).state == D.ENDPOINT_STATE_READY
        assert name in [e.spec.name for e in await client.list()]
        [live] = await client.deployments(name)
        assert live.engine_config.max_num_seqs == 8
        promoted = await client.promote(
            name, engine_config=D.EngineConfig(engine="vllm", max_num_seqs=16), reason="client test"
        )
        assert promoted.engine_config.max_num_seqs == 16
        assert len(await client.deployments(name, include_stopped=True)) >= 2
        update = pb.UpdateEndpointRequest(name=name)
        update.spec.slo.ttft_p99_ms = 700.0
        update.update_mask.paths.append("slo.ttft_p99_ms")
        assert (await client.update(update)).spec.slo.ttft_p99_ms == 700.0
        deleted = await client.delete(name)
        assert deleted.spec.name == name


async def test_a_repeated_request_id_creates_once(stack: Stack) -> None:
    """What makes retrying a create safe: the deployer answers a second try with the first's endpoint."""
    name = new_name()
    async with EndpointClient(Connection(address=stack.address, token=TOKEN_A)) as client:
        first = await client.create(spec(name), request_id="client-test-" + name)
        again = await client.create(spec(name), request_id="client-test-" + name)
        assert again.uid == first.uid
        await client.delete(name)


async def test_refusals_are_one_line_errors_with_their_status(stack: Stack) -> None:
    async with EndpointClient(Connection(address=stack.address, token=TOKEN_B)) as client:
        with pytest.raises(RpcError) as missing:
            await client.get("no-such-endpoint")
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
        assert str(missing.value).startswith("NOT_FOUND: ") and "\n" not in str(missing.value)
    async with EndpointClient(Connection(address=stack.address, token="not-a-token-0123456789")) as client:
        with pytest.raises(RpcError) as refused:
            await client.list()
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
