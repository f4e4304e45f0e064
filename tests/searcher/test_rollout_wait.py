"""A search queued behind a winner waits for the winner's rollout and learns how it ended (real
NATS KV)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.bus.kv import Bucket
from evertune.store import Store, migrate
from evertune.v1 import endpoint_pb2

from .stack import make_searcher, running


def _deployment(endpoint: str, state: endpoint_pb2.DeploymentState, *, origin: str) -> bytes:
    return endpoint_pb2.Deployment(
        id="dep-2", endpoint=endpoint, state=state, origin_search_id=origin
    ).SerializeToString()


async def test_the_wait_ends_with_the_rollout_or_when_none_starts(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, searcher_model_dir: Path
) -> None:
    await migrate(store)
    searcher = make_searcher(
        tmp_path, model_dir=searcher_model_dir, rollout_appear_s=0.5, rollout_wait_s=20.0
    )
    async with running(searcher, nc, store):
        searches = searcher.searches
        assert searches is not None
        deployments = await Bucket.open(js, "deployments")
        # No rollout of the winner starts (a policy that does not roll out, a refused winner).
        started = time.monotonic()
        assert await searches.wait_for_rollout("ep-a", "search-1") is None
        assert time.monotonic() - started < 5.0
        # Its canary runs: the wait lasts until the deployment leaves the canary state. Another
        # search's deployment of the endpoint does not end it.
        # The bucket holds other keys beside deployments (the deployer's rollout mutex, JSON).
        await deployments.create("ep-a._rollout", b'{"deployment_id": "dep-2"}')
        key = "ep-a.dep-2"
        revision = await deployments.create(
            key, _deployment("ep-a", endpoint_pb2.DEPLOYMENT_STATE_CANARY, origin="search-1")
        )
        await deployments.create(
            "ep-a.dep-3", _deployment("ep-a", endpoint_pb2.DEPLOYMENT_STATE_ACTIVE, origin="search-0")
        )
        waiting = asyncio.create_task(searches.wait_for_rollout("ep-a", "search-1"))
        await asyncio.sleep(1.5)  # past rollout_appear_s: the canary was seen, so it keeps waiting
        assert not waiting.done()
        await deployments.update(
            key,
            _deployment("ep-a", endpoint_pb2.DEPLOYMENT_STATE_ACTIVE, origin="search-1"),
            revision=revision,
        )
        # promoted: the state says so (a queued search is then dropped, `_start_queued`)
        assert await asyncio.wait_for(waiting, timeout=10.0) == endpoint_pb2.DEPLOYMENT_STATE_ACTIVE
