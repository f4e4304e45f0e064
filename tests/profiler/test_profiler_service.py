"""Profiles from real ClickHouse (chDB) and a real nats-server: SQL figures, storage, triggers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from google.protobuf.duration_pb2 import Duration
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from evertune.domain.workloads.prefix_reuse import HORIZON_S
from evertune.infra.bus import Bucket, publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings
from evertune.infra.store import Store, migrate
from evertune.profiler import ProfilerService, ProfilerSettings, catalog
from evertune.profiler.builder import build_from_store, profile_id_for
from evertune.profiler.profile import ProfileConfig, RequestSample, aggregates_of, build_profile
from evertune.profiler.queries import request_samples, window_aggregates
from evertune.profiler.sink import COLUMNS, TABLE, rows_of
from evertune.v1 import endpoint_pb2, events_pb2, telemetry_pb2
from tests.profiler.synthetic import as_record, reuse_share, voice
from tests.profiler.test_bottleneck import metrics_text

BLOCK = 16


def uid_of(endpoint: str) -> str:
    """The endpoint id (Endpoint.uid's form) the tests record an endpoint's requests under."""
    return "ep-" + hashlib.sha256(endpoint.encode()).hexdigest()[:24]


async def insert(
    store: Store, endpoint: str, samples: list[RequestSample], *, endpoint_uid: str | None = None
) -> None:
    """The samples as the sink stores the gateway's records of them, under `endpoint_uid`
    (default `uid_of(endpoint)`; '' as recorded before endpoints had ids)."""
    uid = uid_of(endpoint) if endpoint_uid is None else endpoint_uid
    batch = telemetry_pb2.RequestRecordBatch(
        records=[as_record(s, endpoint=endpoint, endpoint_uid=uid, block=BLOCK) for s in samples]
    )
    await store.insert(TABLE, rows_of(batch), COLUMNS, dedup_token=f"t-{uuid.uuid4().hex}")


@pytest.fixture
async def db(store: Store) -> Store:
    await migrate(store)
    return store


async def test_sql_figures_match_the_pure_core(db: Store) -> None:
    generated = voice(seed=8, duration_s=900.0, calls_per_s=0.4, block=BLOCK)
    samples = [g.sample for g in generated]
    await insert(db, "voice", samples)
    await insert(db, "other", samples[:50])
    since = datetime.fromtimestamp(samples[0].start_s, UTC) - timedelta(minutes=1)
    until = since + timedelta(hours=1)
    sql = await window_aggregates(db, "voice", since, until, endpoint_uid=uid_of("voice"))
    pure = aggregates_of(samples)
    assert sql.requests == pure.requests == len(samples)
    assert sql.minute_counts == pure.minute_counts
    assert sql.first_s == pytest.approx(pure.first_s) and sql.last_s == pytest.approx(pure.last_s)
    for a, b in ((sql.prompt_tokens, pure.prompt_tokens), (sql.completion_tokens, pure.completion_tokens)):
        assert (a.count, a.bin_width, a.histogram) == (b.count, b.bin_width, b.histogram)
        assert (a.mean, a.p50, a.p90, a.p99, a.max) == pytest.approx((b.mean, b.p50, b.p90, b.p99, b.max))
    prompts = [s.prompt_tokens for s in samples]
    assert sql.prompt_tokens.p90 == pytest.approx(np.percentile(prompts, 90))
    assert sql.ttft_p50_ms == pytest.approx(np.percentile([s.ttft_ms for s in samples], 50))
    assert sql.itl_p99_ms == pytest.approx(10.0)
    fetched = await request_samples(db, "voice", since, until, endpoint_uid=uid_of("voice"), limit=10_000)
    assert [s.request_id for s in fetched] == [s.request_id for s in samples]
    assert fetched[5].prefix_hashes == samples[5].prefix_hashes
    # The most recent ones only, oldest first, when the window holds more than the limit.
    recent = await request_samples(db, "voice", since, until, endpoint_uid=uid_of("voice"), limit=100)
    assert [s.request_id for s in recent] == [s.request_id for s in samples[-100:]]

    built = await build_from_store(
        db,
        endpoint="voice",
        since=since,
        until=until,
        config=ProfileConfig(block_tokens=BLOCK),
        max_samples=10_000,
    )
    expected = build_profile(
        endpoint="voice",
        window_start=since,
        window_end=until,
        aggregates=pure,
        samples=samples,
        config=ProfileConfig(block_tokens=BLOCK),
    )
    assert built.profile.rate == expected.rate
    assert built.profile.prefix.share == pytest.approx(
        reuse_share(generated, block=BLOCK, horizon_s=HORIZON_S)
    )
    assert built.profile.bottleneck.verdict == "prefill"  # TTFT = 40 ms + 0.05 ms/token, nothing else
    assert len(built.records) == len(samples)
    assert built.endpoint_uid == uid_of("voice")  # no id asked: that of the newest request


async def test_empty_window(db: Store) -> None:
    now = datetime.now(UTC)
    built = await build_from_store(
        db,
        endpoint="nobody",
        since=now - timedelta(hours=1),
        until=now,
        config=ProfileConfig(),
        max_samples=10,
    )
    assert built.profile.requests == 0 and "no telemetry for endpoint 'nobody'" in built.profile.empty_reason
    assert built.records == []


class Running:
    def __init__(self, service: ProfilerService, endpoint: str, settings: ProfilerSettings) -> None:
        self.service, self.endpoint, self.settings = service, endpoint, settings


@pytest.fixture
async def running(nc: Client, js: JetStreamContext, db: Store) -> AsyncIterator[Running]:
    name = uuid.uuid4().hex[:10]
    endpoint = f"ep-{name}"
    settings = ProfilerSettings(
        sink_subject=f"evertune.telemetry.t-{name}",
        sink_durable=f"sink-{name}",
        drift_durable=f"drift-{name}",
        drift_subject=f"evertune.events.drift.detected.{endpoint}",
        request_subject=f"evertune.svc.profiler.t-{name}",
        schedule_interval_s=0,
        prefix_block_tokens=BLOCK,
    )
    service = ProfilerService(settings)
    await service.start(ServiceContext(shared=SharedSettings(), nc=nc, js=js, store=db))
    try:
        yield Running(service, endpoint, settings)
    finally:
        await service.stop(5)


async def request(nc: Client, run: Running, **body: object) -> dict[str, Any]:
    reply = await nc.request(run.settings.request_subject, json.dumps(body).encode(), timeout=30)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


def recent_samples(seed: int = 9) -> list[RequestSample]:
    return [g.sample for g in voice(seed=seed, start_s=time.time() - 900, duration_s=600.0, calls_per_s=0.3)]


async def test_drift_event_builds_stores_and_announces(
    nc: Client, js: JetStreamContext, db: Store, running: Running
) -> None:
    samples = recent_samples()
    await insert(db, running.endpoint, samples)
    ready = await nc.subscribe(f"evertune.events.profile.ready.{running.endpoint}")
    drift = events_pb2.DriftDetected(current_window=Duration(seconds=3600))
    event = new_event(
        EventKind.DRIFT_DETECTED, endpoint=running.endpoint, source="tests", payload_message=drift
    )
    await publish_event(js, event)
    msg = await ready.next_msg(timeout=30)
    announced = events_pb2.Event.FromString(msg.data)
    assert announced.cause_id == event.id and announced.source == "profiler"
    # The event had no endpoint id: the profile is of the id of the newest request in the window.
    assert announced.endpoint_uid == uid_of(running.endpoint)
    payload = announced.profile_ready
    assert payload.trigger == "drift" and payload.version == 1 and payload.request_count == len(samples)
    assert payload.summary.prefix_block_tokens == BLOCK and payload.bottleneck_verdict == "prefill"
    assert payload.summary.rate_rps == pytest.approx(
        len(samples) / (samples[-1].start_s - samples[0].start_s), rel=1e-3
    )
    stored = await catalog.by_cause(db, running.endpoint, event.id)
    assert stored is not None and stored.profile_id == payload.profile_id
    assert stored.endpoint_uid == uid_of(running.endpoint)
    assert stored.trace_jsonl.count("\n") == len(samples) and payload.trace_sha256 == stored.trace_sha256
    assert payload.trace_uri == catalog.trace_uri(db.database, payload.profile_id)
    # The same event again (a redelivery) announces the stored profile; nothing new is built.
    published = running.service.stats.published
    await running.service._on_drift(Msg(nc, subject=msg.subject, data=event.SerializeToString()))
    assert running.service.stats.published == published + 1 and running.service.stats.built == 1
    assert await catalog.next_version(db, running.endpoint) == 2
    await ready.unsubscribe()


async def test_request_subject_latest_build_and_errors(nc: Client, db: Store, running: Running) -> None:
    samples = recent_samples(seed=12)
    await insert(db, running.endpoint, samples)
    first = await request(nc, running, endpoint=running.endpoint)
    assert first["ok"] and first["built"] and first["stored"]["version"] == 1
    again = await request(nc, running, endpoint=running.endpoint)
    assert (
        again["ok"] and not again["built"] and again["stored"]["profile_id"] == first["stored"]["profile_id"]
    )
    rebuilt = await request(nc, running, endpoint=running.endpoint, action="build", window_s=60)
    assert rebuilt["stored"]["version"] == 2
    assert rebuilt["stored"]["profile"]["requests"] < len(samples)
    unknown = await request(nc, running, endpoint="no-such-endpoint")
    assert unknown == {
        "ok": False,
        "code": "not_found",
        "error": "unknown endpoint 'no-such-endpoint': no telemetry and no profile of it",
    }
    bad = await request(nc, running, endpoint=running.endpoint, action="explode")
    assert bad["code"] == "invalid_argument"
    latest = await catalog.latest(db, running.endpoint)
    assert latest is not None and latest.version == 2


async def test_scheduled_round_profiles_active_endpoints(db: Store, running: Running) -> None:
    await insert(db, running.endpoint, recent_samples(seed=13))
    built = await running.service.scheduled_round(datetime.now(UTC))
    mine = [b for b in built if b.endpoint == running.endpoint]
    assert len(mine) == 1 and mine[0].trigger == "schedule"


async def test_engine_metrics_from_the_deployments_bucket(
    js: JetStreamContext, db: Store, running: Running
) -> None:
    scrapes = [
        metrics_text(queue_sum=0, prefill_sum=0, ttft_sum=0, count=0, preemptions=0),
        metrics_text(queue_sum=30, prefill_sum=5, ttft_sum=35, count=100, preemptions=2),
    ]

    async def handler(_: web.Request) -> web.Response:
        return web.Response(text=scrapes.pop(0) if len(scrapes) > 1 else scrapes[0])

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    bucket = await Bucket.open(js, "deployments")
    key = f"{running.endpoint}.d1"
    deployment = endpoint_pb2.Deployment(
        id="d1", endpoint=running.endpoint, upstream_url=f"http://127.0.0.1:{port}"
    )
    await bucket.create(key, deployment.SerializeToString())
    try:
        await insert(db, running.endpoint, recent_samples(seed=14))
        await running.service.build(running.endpoint, trigger="api")  # first scrape: the baseline
        stored = await running.service.build(running.endpoint, trigger="api")
        report = stored.profile.bottleneck
        assert report.source == "engine" and report.verdict == "queueing"
        assert "mean queue 300.0 ms, prefill 50.0 ms" in report.evidence[0]
        assert stored.ready.bottleneck_source == "engine"
    finally:
        await bucket.delete(key)
        await runner.cleanup()


# --- profiles belong to an endpoint id, not a name ------------------------------------------------

OLD_UID, NEW_UID = "ep-" + "a" * 24, "ep-" + "b" * 24


async def two_incarnations(db: Store, endpoint: str) -> tuple[list[RequestSample], list[RequestSample]]:
    """The name deleted and created again within the last hour: the old endpoint's requests 50 to
    40 minutes ago, the new one's 15 to 5 minutes ago (`recent_samples`), each under its own id."""
    now = time.time()
    old = [g.sample for g in voice(seed=21, start_s=now - 3000, duration_s=600.0, calls_per_s=0.5)]
    new = recent_samples(seed=22)
    await insert(db, endpoint, old, endpoint_uid=OLD_UID)
    await insert(db, endpoint, new, endpoint_uid=NEW_UID)
    assert len(old) != len(new) and old[-1].start_s < new[0].start_s
    return old, new


async def test_the_scheduled_profile_counts_only_the_newest_endpoint_id(
    nc: Client, db: Store, running: Running
) -> None:
    _, new = await two_incarnations(db, running.endpoint)
    ready = await nc.subscribe(f"evertune.events.profile.ready.{running.endpoint}")
    built = await running.service.scheduled_round(datetime.now(UTC))
    [mine] = [b for b in built if b.endpoint == running.endpoint]
    assert mine.endpoint_uid == mine.profile.endpoint_uid == NEW_UID
    assert mine.profile.requests == mine.ready.request_count == len(new)
    assert mine.trace_jsonl.count("\n") == len(new)
    stored = await catalog.by_id(db, mine.profile_id)  # the row keeps the id
    assert stored is not None and stored.endpoint_uid == NEW_UID and stored.profile.requests == len(new)
    announced = events_pb2.Event.FromString((await ready.next_msg(timeout=30)).data)
    assert announced.endpoint_uid == NEW_UID and announced.profile_ready.profile_id == mine.profile_id
    await ready.unsubscribe()


async def test_latest_answers_only_the_asked_endpoint_id(nc: Client, db: Store, running: Running) -> None:
    old, new = await two_incarnations(db, running.endpoint)
    ep = running.endpoint
    of_old = await request(nc, running, endpoint=ep, endpoint_uid=OLD_UID, action="build")
    assert of_old["ok"] and of_old["endpoint_uid"] == of_old["stored"]["endpoint_uid"] == OLD_UID
    assert of_old["stored"]["profile"]["requests"] == len(old) and of_old["stored"]["version"] == 1
    # The new id has no profile yet: `latest` builds one of it, never answers the old one's.
    of_new = await request(nc, running, endpoint=ep, endpoint_uid=NEW_UID)
    assert of_new["ok"] and of_new["built"] and of_new["stored"]["endpoint_uid"] == NEW_UID
    assert of_new["stored"]["profile"]["requests"] == len(new) and of_new["stored"]["version"] == 2
    # The old id's latest is its own although the name's newest version is the new id's, and back.
    again_old = await request(nc, running, endpoint=ep, endpoint_uid=OLD_UID)
    assert not again_old["built"] and again_old["stored"]["profile_id"] == of_old["stored"]["profile_id"]
    again_new = await request(nc, running, endpoint=ep, endpoint_uid=NEW_UID, build_if_missing=False)
    assert not again_new["built"] and again_new["stored"]["profile_id"] == of_new["stored"]["profile_id"]
    # No id asked: the id of the newest request.
    unnamed = await request(nc, running, endpoint=ep)
    assert unnamed["endpoint_uid"] == NEW_UID
    assert unnamed["stored"]["profile_id"] == of_new["stored"]["profile_id"]
    latest_old = await catalog.latest(db, ep, endpoint_uid=OLD_UID)
    assert latest_old is not None and latest_old.profile_id == of_old["stored"]["profile_id"]


async def test_an_endpoint_id_without_rows_is_not_found(nc: Client, db: Store, running: Running) -> None:
    await insert(db, running.endpoint, recent_samples(seed=23), endpoint_uid=OLD_UID)
    stranger = "ep-" + "c" * 24
    for body in ({"action": "build"}, {"action": "latest"}):
        answer = await request(nc, running, endpoint=running.endpoint, endpoint_uid=stranger, **body)
        assert answer == {
            "ok": False,
            "code": "not_found",
            "error": f"unknown endpoint {running.endpoint!r} with id {stranger!r}: "
            "no telemetry and no profile of it",
        }
    quiet = await request(
        nc, running, endpoint=running.endpoint, endpoint_uid=stranger, build_if_missing=False
    )
    assert quiet["code"] == "not_found"
    assert running.service.stats.built == 0 and await catalog.latest(db, running.endpoint) is None
    bad = await request(nc, running, endpoint=running.endpoint, endpoint_uid="x y")
    assert bad["code"] == "invalid_argument"


async def test_a_drift_event_profiles_its_own_endpoint_id(
    nc: Client, js: JetStreamContext, db: Store, running: Running
) -> None:
    old, _ = await two_incarnations(db, running.endpoint)
    ready = await nc.subscribe(f"evertune.events.profile.ready.{running.endpoint}")
    drift = events_pb2.DriftDetected(current_window=Duration(seconds=3600))
    event = new_event(
        EventKind.DRIFT_DETECTED,
        endpoint=running.endpoint,
        source="tests",
        payload_message=drift,
        endpoint_uid=OLD_UID,
    )
    await publish_event(js, event)
    announced = events_pb2.Event.FromString((await ready.next_msg(timeout=30)).data)
    assert announced.endpoint_uid == OLD_UID and announced.profile_ready.request_count == len(old)
    stored = await catalog.by_cause(db, running.endpoint, event.id, endpoint_uid=OLD_UID)
    assert stored is not None and stored.profile_id == announced.profile_ready.profile_id
    assert await catalog.by_cause(db, running.endpoint, event.id, endpoint_uid=NEW_UID) is None
    # The same cause under another id of the name is another profile.
    assert stored.profile_id == profile_id_for(running.endpoint, event.id, OLD_UID)
    assert stored.profile_id != profile_id_for(running.endpoint, event.id, NEW_UID)
    await ready.unsubscribe()


async def test_rows_from_before_endpoint_ids_belong_to_none(db: Store) -> None:
    now = datetime.now(UTC)
    since, until = now - timedelta(hours=1), now
    legacy = [g.sample for g in voice(seed=24, start_s=time.time() - 3000, duration_s=600.0, calls_per_s=0.5)]
    await insert(db, "voice", legacy, endpoint_uid="")
    identified = recent_samples(seed=25)
    await insert(db, "voice", identified, endpoint_uid=NEW_UID)
    with_id = await window_aggregates(db, "voice", since, until, endpoint_uid=NEW_UID)
    assert with_id.requests == len(identified)
    samples = await request_samples(db, "voice", since, until, endpoint_uid=NEW_UID, limit=100_000)
    assert [(s.request_id, s.start_s) for s in samples] == [(s.request_id, s.start_s) for s in identified]
    assert (await window_aggregates(db, "voice", since, until, endpoint_uid="")).requests == len(legacy)
    # A profile stored before ids ('') is never the latest of an id.
    built = await build_from_store(
        db,
        endpoint="voice",
        since=since,
        until=until,
        config=ProfileConfig(),
        max_samples=10,
        endpoint_uid="",
    )
    assert built.profile.requests == len(legacy)
    legacy_profile = catalog.StoredProfile(
        endpoint="voice",
        version=await catalog.next_version(db, "voice"),
        profile_id="prof-legacy",
        created=now,
        trigger="schedule",
        cause_id="",
        ready=events_pb2.ProfileReady(profile_id="prof-legacy"),
        profile=built.profile,
        trace_jsonl="",
        trace_sha256="",
    )
    await catalog.save(db, legacy_profile)
    assert await catalog.latest(db, "voice", endpoint_uid=NEW_UID) is None
    assert not await catalog.known_endpoint(db, "voice", endpoint_uid=NEW_UID)
    assert (await catalog.latest(db, "voice")) is not None


async def test_stop_is_prompt(running: Running) -> None:
    await asyncio.sleep(0.1)
    t0 = time.monotonic()
    await running.service.stop(5)
    assert time.monotonic() - t0 < 2.0 and running.service.state == "stopped"
