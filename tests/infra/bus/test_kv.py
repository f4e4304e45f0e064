from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from nats.js import JetStreamContext

from evertune.errors import AlreadyExists, ConflictError, NotFound
from evertune.infra.bus import Bucket


@pytest.fixture
async def bucket(js: JetStreamContext) -> Bucket:
    # A bucket of its own: the deployer's `endpoints` bucket holds Endpoint protobufs only, and
    # other tests in the session read it.
    await js.create_key_value(bucket="test_kv", history=5)  # idempotent with the same config
    return await Bucket.open(js, "test_kv")


async def test_create_then_compare_and_set(bucket: Bucket) -> None:
    key = f"ep-{uuid.uuid4().hex[:8]}"
    revision = await bucket.create(key, b"v1")
    with pytest.raises(AlreadyExists):
        await bucket.create(key, b"again")

    newer = await bucket.update(key, b"v2", revision=revision)
    with pytest.raises(ConflictError, match=f"since revision {revision}"):
        await bucket.update(key, b"stale write", revision=revision)
    entry = await bucket.get(key)
    assert entry is not None and entry.value == b"v2" and entry.revision == newer

    await bucket.delete(key)
    assert await bucket.get(key) is None
    with pytest.raises(NotFound):
        await bucket.delete(key)


async def test_concurrent_mutations_lose_no_update(bucket: Bucket) -> None:
    key = f"counter-{uuid.uuid4().hex[:8]}"

    def increment(current: bytes | None) -> bytes:
        count = json.loads(current) if current else 0
        return json.dumps(count + 1).encode()

    await asyncio.gather(*(bucket.mutate(key, increment, attempts=50) for _ in range(12)))
    entry = await bucket.get(key)
    assert entry is not None and json.loads(entry.value) == 12


async def test_every_listing_finds_every_live_key(js: JetStreamContext) -> None:
    # nats-py's kv.keys() found such a bucket empty in about 2% of listings here (the server's
    # deliveries still on their way when it asks whether anything is pending); 300 listings
    # catch that with a probability above 99.9%.
    name = f"test_list_{uuid.uuid4().hex[:8]}"
    await js.create_key_value(bucket=name)
    try:
        bucket = await Bucket.open(js, name)
        live = [f"k{i:02d}" for i in range(20)]
        for key in live:
            await bucket.create(key, b"v")
        for i in range(200):
            await bucket.create(f"gone{i}", b"v")
            await bucket.delete(f"gone{i}")
        misses = [keys for keys in [await bucket.keys() for _ in range(300)] if keys != live]
        assert misses == []
    finally:
        await js.delete_key_value(name)


async def test_an_empty_bucket_lists_no_keys(js: JetStreamContext) -> None:
    name = f"test_empty_{uuid.uuid4().hex[:8]}"
    await js.create_key_value(bucket=name)
    try:
        bucket = await Bucket.open(js, name)
        assert await bucket.keys() == []
        await bucket.create("only", b"v")
        await bucket.delete("only")
        assert await bucket.keys() == []
    finally:
        await js.delete_key_value(name)
