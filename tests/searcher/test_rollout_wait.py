"""A search queued behind a winner waits for the winner's rollout and learns how it ended (real
NATS KV)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.infra.bus.kv import Bucket
from evertune.infra.store import Store, migrate
from evertune.searcher.searches import SearchSupervisor
from evertune.v1 import endpoint_pb2
from evertune.v1 import search_service_pb2 as pb

from .stack import make_searcher, running


def _deployment(endpoint: str, state: endpoint_pb2.DeploymentState, *, origin: str) -> bytes:
    return endpoint_pb2.Deployment(
        id="dep-2", endpoint=endpoint, state=state, origin_search_id=origin
    ).SerializeToString()


@contextlib.asynccontextmanager
async def _searches(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, model_dir: Path
) -> AsyncIterator[tuple[SearchSupervisor, Bucket]]:
    """A running searcher (rollouts seen within 0.5 s, waited for up to 20 s) and the deployments bucket."""
    await migrate(store)
    searcher = make_searcher(tmp_path, model_dir=model_dir, rollout_appear_s=0.5, rollout_wait_s=20.0)
    async with running(searcher, nc, store):
        assert searcher.searches is not None
        yield searcher.searches, await Bucket.open(js, "deployments")


async def test_the_wait_ends_with_the_rollout_or_when_none_starts(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, searcher_model_dir: Path
) -> None:
    async with _searches(nc, js, store, tmp_path, searcher_model_dir) as (searches, deployments):
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


async def test_a_request_that_arrives_during_the_winners_rollout_waits_and_is_dropped_at_promotion(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, searcher_model_dir: Path
) -> None:
    """A drift seen while the canary and the stable configuration share the traffic describes
    neither: its search waits for the rollout (not started beside the canary) and is dropped when
    the winner is promoted."""
    async with _searches(nc, js, store, tmp_path, searcher_model_dir) as (searches, deployments):
        key = "ep-b.dep-2"
        revision = await deployments.create(
            key, _deployment("ep-b", endpoint_pb2.DEPLOYMENT_STATE_CANARY, origin="search-1")
        )
        searches._winner_of["ep-b"] = "search-1"  # search-1 just ended with this winner
        drain = asyncio.create_task(searches._start_queued("ep-b"))
        await asyncio.sleep(1.0)
        request = pb.StartSearchRequest(request_id="drift-during-canary", endpoint="ep-b")
        assert await searches.start_or_queue(request, trigger="drift") is None
        assert searches.queued("ep-b") == request
        await deployments.update(
            key,
            _deployment("ep-b", endpoint_pb2.DEPLOYMENT_STATE_ACTIVE, origin="search-1"),
            revision=revision,
        )
        await asyncio.wait_for(drain, timeout=10.0)
        assert searches.queued("ep-b") is None and not await searches.records.unfinished("ep-b")
