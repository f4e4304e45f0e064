"""KvFollower and Resubscriber against a private nats-server that is killed and restarted (same port,
same store dir): changes made after the restart must reach the follower."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.kv import KeyValue

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import KvFollower, Resubscriber, connect, reconnect_signal
from evertune.infra.nats_server import EmbeddedNats

BUCKET = "follow-test"


@dataclass
class Private:
    server: EmbeddedNats
    nc: Client
    kv: KeyValue


@pytest.fixture
async def private(tmp_path: Path) -> AsyncIterator[Private]:
    """A nats-server of this test's own (so it can be killed), a client and a KV bucket."""
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    nc: Client | None = None
    try:
        nc = await connect(server.url, name="follow-test")
        kv = await nc.jetstream().create_key_value(bucket=BUCKET, history=1)
        yield Private(server=server, nc=nc, kv=kv)
    finally:
        if nc is not None:
            await nc.close()
        await server.stop()


async def _restart(p: Private) -> None:
    """Kill the server, start it again, and wait until the client has reconnected."""
    before = reconnect_signal(p.nc).generation
    await p.server.kill()
    await asyncio.sleep(0.5)
    await p.server.restart()
    await eventually(lambda: p.nc.stats["reconnects"] > before, timeout_s=15, what="the client reconnected")


async def test_a_change_after_a_nats_restart_reaches_the_follower(private: Private) -> None:
    state: dict[str, bytes] = {}

    def apply(key: str, value: bytes | None) -> None:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value

    await private.kv.put("a", b"1")
    follower = KvFollower(private.nc.jetstream(), private.nc, BUCKET, apply, retry_s=0.2)
    await follower.load()
    assert state == {"a": b"1"} and follower.stats.loads == 1
    stopping = asyncio.Event()
    running = asyncio.create_task(follower.run(stopping))
    try:
        await private.kv.put("b", b"2")
        await eventually(lambda: state.get("b") == b"2", timeout_s=5, what="a change before the restart")

        await _restart(private)
        await eventually(lambda: follower.stats.loads >= 2, timeout_s=15, what="a reload after the reconnect")
        kv = await private.nc.jetstream().key_value(BUCKET)  # the bucket survived (file store)
        await kv.put("c", b"3")
        await kv.delete("a")
        await kv.put("b", b"22")
        await eventually(
            lambda: state == {"b": b"22", "c": b"3"}, timeout_s=10, what="changes after the restart"
        )
    finally:
        stopping.set()
        await asyncio.wait_for(running, 5)
    assert running.result() is None


async def test_a_reload_applies_keys_gone_without_a_marker_as_deletes(private: Private) -> None:
    applied: list[tuple[str, bytes | None]] = []
    follower = KvFollower(private.nc.jetstream(), private.nc, BUCKET, lambda k, v: applied.append((k, v)))
    await private.kv.put("a", b"1")
    await private.kv.put("b", b"2")
    await follower.load()
    # every message of "a" removed from the bucket's stream: gone with no delete marker to watch
    await private.nc.jetstream().purge_stream(f"KV_{BUCKET}", subject=f"$KV.{BUCKET}.a")
    applied.clear()
    await follower.load()
    await follower.stop()
    assert applied == [("b", b"2"), ("a", None)]


async def test_an_ordered_consumer_is_made_again_after_a_nats_restart(private: Private) -> None:
    js = private.nc.jetstream()
    await js.add_stream(StreamConfig(name="FOLLOWT", subjects=["followt.>"]))
    seen: list[bytes] = []

    async def on_msg(msg: Msg) -> None:
        seen.append(msg.data)

    async def subscribe() -> object:
        return await js.subscribe(
            "followt.>",
            stream="FOLLOWT",
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT),
            cb=on_msg,
        )

    await js.publish("followt.x", b"before")
    resub = Resubscriber(private.nc, subscribe, name="followt", retry_s=0.2)
    await resub.start()
    stopping = asyncio.Event()
    running = asyncio.create_task(resub.run(stopping))
    try:
        await eventually(lambda: seen == [b"before"], timeout_s=5, what="the first message")
        await _restart(private)
        await eventually(lambda: resub.subscriptions >= 2, timeout_s=15, what="a re-subscribe")
        await js.publish("followt.x", b"after")
        await eventually(lambda: b"after" in seen, timeout_s=10, what="a message after the restart")
        # the re-subscribe delivers the last message per subject again: callbacks must be idempotent
        assert set(seen) == {b"before", b"after"}
    finally:
        stopping.set()
        await asyncio.wait_for(running, 5)
