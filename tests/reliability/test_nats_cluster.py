"""A three-node JetStream cluster loses the node that leads the telemetry stream mid-replay, and
gets it back: every request the upstream served has exactly one row, the sink's consumer carries
on, and no control-plane event is lost or doubled.

Real parts: three nats-servers on loopback started from `infra/nats/cluster.conf`, streams and
buckets R3 (`nats_replicas=3`), the gateway and the profiler's sink hosted as `evertune up` hosts
them with every node's URL, the fake engine upstream in its own process, the open-loop replay
client, the session's chDB engine (a database of this test's own). The events stream is made to
share the killed node as its leader, and control-plane events are published throughout with
evertune's `publish_event` (which tries an event no stream stored again, under its own id); a
durable consumer made before the outage reads them back.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from evertune.apps.harness.nats_cluster import NatsCluster
from evertune.apps.harness.waiting import eventually
from evertune.domain.replay import replay
from evertune.infra.bus import connect, publish_event
from evertune.infra.events import EventKind, event_filter_subject, new_event
from evertune.infra.nats_server import EmbeddedNats
from evertune.v1 import events_pb2
from tests.domain.replay.conftest import fake_url
from tests.domain.replay.helpers import chat_plan
from tests.gateway.conftest import put_routes
from tests.reliability.helpers import telemetry_path, upstream_ids, wait_rows

__all__ = ["fake_url"]

pytestmark = pytest.mark.reliability

REQUESTS = 200  #: requests in the replay
EVERY_S = 0.025  #: 40 requests/s, open loop: about 5 s of traffic
KILL_AT_S = 1.0  #: the telemetry stream's leader is killed this long after the replay starts ...
DOWN_S = 3.0  #: ... and restarted this long after
EVENTS = 40  #: control-plane events published during the replay, one every EVERY_S * 4


async def _control_plane(js: JetStreamContext, endpoint: str) -> tuple[list[str], float]:
    """Publish breaches over the replay's span; returns their ids and the longest publish, s."""
    ids, longest = [], 0.0
    for i in range(EVENTS):
        payload = events_pb2.SlaBreach(breach_id=f"b{i}", deployment="dep-r", burn_rate=1.0)
        event = new_event(EventKind.SLA_BREACH, endpoint=endpoint, source="test", payload_message=payload)
        started = time.monotonic()
        await publish_event(js, event)
        longest = max(longest, time.monotonic() - started)
        ids.append(event.id)
        await asyncio.sleep(EVERY_S * 4)
    return ids, longest


async def _read_events(js: JetStreamContext, durable: str, want: int) -> list[str]:
    """Ids of the events the durable consumer delivers (acked), until `want` or 30 s."""
    sub = await js.pull_subscribe_bind(durable, stream="EVENTS")
    got: list[str] = []
    deadline = time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        try:
            msgs = await sub.fetch(50, timeout=1.0)
        except TimeoutError:
            continue
        for msg in msgs:
            event = events_pb2.Event()
            event.ParseFromString(msg.data)
            got.append(event.id)
            await msg.ack()
    await sub.unsubscribe()
    return got


async def test_the_telemetry_leader_killed_mid_replay_loses_and_doubles_nothing(
    store_url: str, fake_url: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    cluster = NatsCluster(tmp_path / "nats")
    await cluster.start()
    endpoint = f"rel-{uuid.uuid4().hex[:8]}"
    admin = await connect(cluster.urls, name="reliability-cluster")
    try:
        async with telemetry_path(
            nats_url=cluster.urls,
            store_url=store_url,
            tokenizer_dir=tokenizer_dir,
            data_dir=tmp_path / "data",
            endpoint=endpoint,
            replicas=3,
        ) as path:
            gateway, profiler = path.gateway, path.profiler
            js = admin.jetstream()
            assert (await js.stream_info("TELEMETRY")).config.num_replicas == 3
            await put_routes(js, gateway, endpoint, [("dep-r", fake_url, 1)])
            durable = f"check-{endpoint}"
            await js.add_consumer(
                "EVENTS",
                ConsumerConfig(
                    durable_name=durable,
                    ack_policy=AckPolicy.EXPLICIT,
                    filter_subject=event_filter_subject(EventKind.SLA_BREACH, endpoint),
                ),
            )
            before = await upstream_ids(fake_url)
            killed: list[EmbeddedNats] = []

            async def chaos() -> None:
                await asyncio.sleep(KILL_AT_S)
                leader = await cluster.leader_of(js, "TELEMETRY")
                await cluster.move_leader(admin, "EVENTS", to=leader)  # the control plane loses it too
                await leader.kill()
                killed.append(leader)
                await asyncio.sleep(DOWN_S)
                await leader.restart()

            chaos_task = asyncio.create_task(chaos())
            events_task = asyncio.create_task(_control_plane(js, endpoint))
            run = await replay(
                chat_plan(REQUESTS, every_s=EVERY_S, prefix=endpoint, max_tokens=4),
                target=f"http://127.0.0.1:{gateway.port}",
                model=endpoint,
                headers={"X-Fake": "ttft_ms=10,itl_ms=2"},
                timeout_s=10.0,
            )
            await chaos_task
            event_ids, longest_publish_s = await events_task
            served = await upstream_ids(fake_url) - before
            assert [r.error_class for r in run.results if not r.ok] == []  # the client never noticed
            assert len(served) == REQUESTS and len(killed) == 1

            counts = await wait_rows(path.store, endpoint, REQUESTS, timeout_s=30)
            assert set(counts) == served  # every request the upstream served, and nothing else
            assert sorted(set(counts.values())) == [1]  # exactly one row each

            # The sink's durable consumer carried on: nothing of the stream is left for it.
            sink_consumer = await js.consumer_info("TELEMETRY", f"sink-{endpoint}")
            assert sink_consumer.num_pending == 0 and sink_consumer.num_ack_pending == 0

            # Every control-plane event is in the stream once and reaches a consumer made before.
            delivered = await _read_events(js, durable, EVENTS)
            assert sorted(delivered) == sorted(event_ids)

            # The killed node is back in the telemetry stream's group and caught up.
            async def rejoined() -> bool:
                info = await js.stream_info("TELEMETRY")
                peers = info.cluster.replicas if info.cluster and info.cluster.replicas else []
                return len(peers) == 2 and all(p.current and not p.offline for p in peers)

            await eventually(rejoined, timeout_s=30, what="the killed node caught up")
            assert (profiler.state, gateway.state) == ("running", "running")  # no loop of theirs died
            publisher, sink = gateway.publisher, profiler.sink
            assert publisher is not None and sink is not None
            print(
                f"\nnats-cluster: killed={killed[0].cluster.name if killed[0].cluster else '?'}"
                f" requests={REQUESTS} rows={sum(counts.values())} distinct={len(counts)}"
                f" spooled={publisher.stats.spooled_records} published={publisher.stats.published_records}"
                f" sink_batches={sink.stats.batches} sink_retried={sink.stats.retried}"
                f" events={len(event_ids)} longest_event_publish_s={longest_publish_s:.2f}"
            )
    finally:
        await admin.close()
        await cluster.stop()
