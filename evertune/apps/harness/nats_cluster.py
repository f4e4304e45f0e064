"""Three nats-servers on loopback as one JetStream cluster, started from `infra/nats/cluster.conf`,
for tests that take a node away (`tests/reliability/test_nats_cluster.py`).

`await cluster.start()` returns once JetStream answers (the nodes elected a meta leader); clients
connect with `cluster.urls` (every node, comma-separated, as `EVERTUNE_NATS_URL` takes them) and
fail over between the nodes by themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from evertune.apps.harness.waiting import eventually
from evertune.errors import BusUnavailable
from evertune.infra.bus import connect
from evertune.infra.nats_server import ClusterNode, EmbeddedNats, free_port


class NatsCluster:
    """`size` nodes named n0, n1, ...; each keeps its store under `base_dir/<name>` across restarts."""

    def __init__(self, base_dir: Path, *, size: int = 3) -> None:
        cluster_ports = [free_port() for _ in range(size)]
        routes = tuple(f"nats-route://127.0.0.1:{port}" for port in cluster_ports)
        self.nodes = [
            EmbeddedNats(
                base_dir / f"n{i}",
                port=free_port(),
                cluster=ClusterNode(name=f"n{i}", cluster_port=cluster_ports[i], routes=routes),
            )
            for i in range(size)
        ]

    @property
    def urls(self) -> str:
        """Every node's client URL, comma-separated."""
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> EmbeddedNats:
        """The node whose server name is `name`."""
        for node in self.nodes:
            if node.cluster is not None and node.cluster.name == name:
                return node
        raise BusUnavailable(f"no node {name!r} in the cluster")

    async def start(self, *, ready_timeout_s: float = 30.0) -> None:
        """Start every node at once (each waits for its routes), then wait for JetStream to answer."""
        await asyncio.gather(*(node.start(ready_timeout_s=ready_timeout_s) for node in self.nodes))
        client = await connect(self.urls, name="harness-cluster")
        try:
            js = client.jetstream()

            async def answers() -> bool:
                with contextlib.suppress(NatsError, TimeoutError):  # not ready yet
                    await js.account_info()
                    return True
                return False

            await eventually(answers, timeout_s=ready_timeout_s, what="JetStream on the cluster")
        finally:
            await client.close()

    async def leader_of(self, js: JetStreamContext, stream: str) -> EmbeddedNats:
        """The node that leads `stream`'s replicas now."""
        info = await js.stream_info(stream)
        if info.cluster is None or not info.cluster.leader:
            raise BusUnavailable(f"stream {stream} has no leader now")
        return self.node(info.cluster.leader)

    async def move_leader(self, nc: Client, stream: str, *, to: EmbeddedNats) -> None:
        """Make `to` lead `stream` (a step-down with it as the preferred leader), and wait for it."""
        js = nc.jetstream()
        if await self.leader_of(js, stream) is to:
            return
        assert to.cluster is not None
        request = json.dumps({"placement": {"preferred": to.cluster.name}}).encode()
        reply = await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", request, timeout=5)
        if not json.loads(reply.data).get("success"):
            raise BusUnavailable(f"stream {stream}: leader step-down refused: {reply.data[:200]!r}")

        async def moved() -> bool:
            with contextlib.suppress(BusUnavailable):
                return await self.leader_of(js, stream) is to
            return False

        await eventually(moved, timeout_s=15, what=f"{stream} led by {to.cluster.name}")

    async def stop(self) -> None:
        """Stop every node (safe to call twice)."""
        await asyncio.gather(*(node.stop() for node in self.nodes))
