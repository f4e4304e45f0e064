"""A deleted endpoint's search stops: its running search is cancelled and its queued request dropped
(real NATS, real ClickHouse engine)."""

from __future__ import annotations

import uuid
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import publish_event
from evertune.infra.bus.kv import Bucket
from evertune.infra.events import EventKind, new_event
from evertune.infra.store import Store, migrate
from evertune.v1 import endpoint_pb2, events_pb2
from evertune.v1 import search_service_pb2 as pb

from .stack import make_endpoint, make_searcher, running, store_profile


def _deleted(name: str) -> events_pb2.Event:
    return new_event(
        EventKind.ENDPOINT_DELETED,
        endpoint=name,
        source="deployer",
        payload_message=events_pb2.EndpointDeleted(name=name, tenant="t", revision=1),
    )


async def test_deleting_an_endpoint_cancels_its_search_and_drops_its_queued_request(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, searcher_model_dir: Path
) -> None:
    await migrate(store)
    # No runner serves sim-h200: each search's first job waits in the queue until it ends.
    gone = await make_endpoint(js, policy=endpoint_pb2.SEARCH_POLICY_AUTO, hardware="sim-h200")
    kept = await make_endpoint(js, policy=endpoint_pb2.SEARCH_POLICY_AUTO, hardware="sim-h200")
    for name in (gone, kept):
        await store_profile(store, name, searcher_model_dir)
    searcher = make_searcher(tmp_path, model_dir=searcher_model_dir)
    async with running(searcher, nc, store):
        searches = searcher.searches
        assert searches is not None

        async def start(name: str) -> str:
            record = await searches.start(pb.StartSearchRequest(request_id=uuid.uuid4().hex, endpoint=name))
            return record.search_id

        doomed, spared = await start(gone), await start(kept)
        later = pb.StartSearchRequest(request_id="drift-after", endpoint=gone)
        assert await searches.start_or_queue(later, trigger="drift") is None  # queued behind `doomed`

        # A deletion event for a name that exists (created again, or an old event replayed) stops nothing.
        await publish_event(js, _deleted(kept))
        # The deployer deletes the endpoint's entry, then says so.
        await (await Bucket.open(js, "endpoints")).delete(gone)
        await publish_event(js, _deleted(gone))

        async def cancelled() -> bool:
            return (await searches.get(doomed)).done

        await eventually(cancelled, timeout_s=30.0, what="the deleted endpoint's search ended")
        ended = await searches.get(doomed)
        assert ended.search.outcome == events_pb2.SEARCH_OUTCOME_CANCELLED
        assert ended.search.error == f"cancelled: endpoint {gone} was deleted"
        assert searches.queued(gone) is None and not await searches.records.unfinished(gone)
        # the other endpoint's search runs on (its deletion event came first, so it was handled)
        assert not (await searches.get(spared)).done
