"""State in KV: an entry that is not a protobuf of the bucket's type is skipped, not fatal."""

from __future__ import annotations

import uuid

from nats.js import JetStreamContext

from evertune.deployer.state import State
from evertune.infra.bus import Bucket
from evertune.v1 import endpoint_pb2


async def test_listing_skips_an_entry_that_is_not_an_endpoint(js: JetStreamContext) -> None:
    state = await State.open(js)
    endpoints = await Bucket.open(js, "endpoints")
    deployments = await Bucket.open(js, "deployments")
    good, bad = f"ep-{uuid.uuid4().hex[:8]}", f"junk-{uuid.uuid4().hex[:8]}"
    spec = endpoint_pb2.EndpointSpec(name=good, tenant="t", model="m")
    await endpoints.create(good, endpoint_pb2.Endpoint(spec=spec, revision=1).SerializeToString())
    await endpoints.create(bad, b"\xff\xff\xff not a protobuf")
    await deployments.create(f"{good}.dep-junk", b"\xff\xff\xff")
    try:
        names = {e.spec.name for e in await state.list_endpoints()}
        assert good in names
        assert await state.list_deployments(good) == []
    finally:
        await endpoints.delete(good)
        await endpoints.delete(bad)
        await deployments.delete(f"{good}.dep-junk")
