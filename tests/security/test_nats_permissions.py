"""The bus is not trusted: a nats-server started with the configuration `evertune up` generates
(one user per service, scoped by `evertune.infra.bus.permissions`) lets each service do its job and
nothing else. The gateway cannot forge a `search.completed` (the forged-winner hole), nobody
without credentials gets in, and a wrong password is one line. Real nats-server, no mocks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, RePublish

from evertune.errors import BusUnavailable, SettingsError
from evertune.infra.bus import (
    Bucket,
    ConsumerSpec,
    DurableConsumer,
    Entry,
    Handler,
    KvFollower,
    PoisonMessage,
    connect,
    declare,
    load_definitions,
)
from evertune.infra.bus.connection import inbox_prefix
from evertune.infra.bus.permissions import EVENT_KINDS, READS, SERVICES, STREAMS, permissions_for
from evertune.infra.data_dir import Runtime, write_runtime
from evertune.infra.events import EventKind, event_subject
from evertune.infra.nats_auth import EmbeddedCredentials, generate
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.settings import NatsAuth, SharedSettings, load_settings
from tests.tls import self_signed

ACK_TIMEOUT_S = 1.0


@dataclass
class Bus:
    server: EmbeddedNats
    credentials: EmbeddedCredentials

    async def as_user(self, service: str) -> Client:
        return await connect(self.server.url, name=f"test-{service}", auth=self.credentials.services[service])


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[Bus]:
    credentials = generate(tmp_path / "nats")
    server = EmbeddedNats(tmp_path / "nats", config=credentials.config_file)
    await server.start()
    try:
        admin = await connect(server.url, name="test-admin", auth=credentials.admin)
        await declare(admin.jetstream(), load_definitions())
        await admin.close()
        yield Bus(server, credentials)
    finally:
        await server.stop()


async def _published(js: JetStreamContext, subject: str) -> bool:
    """Whether a JetStream publish to `subject` was stored (acked); a refused one gets no ack."""
    try:
        await js.publish(subject, b"x", timeout=ACK_TIMEOUT_S)
    except (TimeoutError, nats.errors.Error):
        return False
    return True


async def _stored(bus: Bus, stream: str, subject: str) -> bool:
    admin = await connect(bus.server.url, name="test-admin-check", auth=bus.credentials.admin)
    try:
        await admin.jetstream().get_last_msg(stream, subject)
    except nats.js.errors.NotFoundError:
        return False
    finally:
        await admin.close()
    return True


async def test_gateway_publishes_telemetry_but_cannot_forge_a_search_result(bus: Bus) -> None:
    gateway = await bus.as_user("gateway")
    try:
        js = gateway.jetstream()
        assert await _published(js, "evertune.telemetry.voice")
        forged = event_subject(EventKind.SEARCH_COMPLETED, "voice")
        assert not await _published(js, forged)
        await gateway.publish(forged, b"core publish too")  # not JetStream: refused just the same
        await gateway.flush()
        assert not await _published(js, event_subject(EventKind.DEPLOY_PROMOTED, "voice"))
        assert not await _published(js, "evertune.jobs.cpu")
    finally:
        await gateway.close()
    assert await _stored(bus, "TELEMETRY", "evertune.telemetry.voice")
    assert not await _stored(bus, "EVENTS", forged)


@pytest.mark.parametrize("service", SERVICES)
async def test_each_service_publishes_the_kinds_it_owns_and_no_other(bus: Bus, service: str) -> None:
    client = await bus.as_user(service)
    try:
        js = client.jetstream()
        for kind in EVENT_KINDS[service]:
            assert await _published(js, event_subject(kind, "voice")), kind
        assert await _published(js, "evertune.events.service.poison_message._system")
        others = [
            k for k in EventKind if k != EventKind.SERVICE_POISON_MESSAGE and k not in EVENT_KINDS[service]
        ]
        assert not await _published(js, event_subject(others[0], "voice")), others[0]
        if service != "gateway":
            assert not await _published(js, "evertune.telemetry.voice")
    finally:
        await client.close()


async def test_runner_consumes_its_durable_of_the_searchers_jobs(bus: Bus) -> None:
    searcher, runner = await bus.as_user("searcher"), await bus.as_user("runner")
    try:
        assert await _published(searcher.jetstream(), "evertune.jobs.cpu")
        sub = await runner.jetstream().pull_subscribe(
            "evertune.jobs.cpu", durable="runner-cpu", stream="JOBS"
        )
        [msg] = await sub.fetch(1, timeout=5)
        assert msg.data == b"x"
        await msg.ack_sync(timeout=5)
        # and the searcher reads its trial reports from EVENTS through a durable of its own
        assert await _published(runner.jetstream(), event_subject(EventKind.TRIAL_COMPLETED, "voice"))
        trials = await searcher.jetstream().pull_subscribe(
            "evertune.events.trial.completed.*", durable="searcher-trials", stream="EVENTS"
        )
        assert len(await trials.fetch(1, timeout=5)) == 1
    finally:
        await searcher.close()
        await runner.close()


async def test_only_the_deployer_writes_the_route_table(bus: Bus) -> None:
    deployer, gateway = await bus.as_user("deployer"), await bus.as_user("gateway")
    try:
        await (await deployer.jetstream().key_value("routes")).put("voice", b"deployer's table")
        tables: dict[str, bytes | None] = {}
        follower = KvFollower(gateway.jetstream(), gateway, "routes", tables.__setitem__)
        await follower.load()  # the gateway follows the table (a watch: its only read of the bucket)
        await follower.stop()
        assert tables == {"voice": b"deployer's table"}
        routes = await gateway.jetstream(timeout=1.0).key_value("routes")
        with pytest.raises((TimeoutError, nats.errors.Error)):
            await routes.put("voice", b"forged table", validate_keys=True)
        assert (
            await (await deployer.jetstream().key_value("routes")).get("voice")
        ).value == b"deployer's table"
    finally:
        await deployer.close()
        await gateway.close()


async def test_no_credentials_and_a_wrong_password_are_refused_in_one_line(bus: Bus) -> None:
    with pytest.raises(BusUnavailable) as nobody:
        await connect(bus.server.url, name="test-nobody", connect_timeout_s=2)
    wrong = NatsAuth(user="gateway", password="not-the-password")
    with pytest.raises(BusUnavailable) as guessed:
        await connect(bus.server.url, name="test-guess", connect_timeout_s=2, auth=wrong)
    for err in (nobody.value, guessed.value):
        assert "refused the login" in str(err) and "\n" not in str(err)
    assert "not-the-password" not in str(guessed.value)
    # a password in the URL (how runtime.json carries the admin's) is not echoed either
    url = bus.server.url.replace("nats://", "nats://admin:url-secret@")
    with pytest.raises(BusUnavailable) as in_url:
        await connect(url, name="test-url", connect_timeout_s=2)
    assert "url-secret" not in str(in_url.value) and "admin:***@" in str(in_url.value)


async def test_the_admin_in_the_runtime_url_can_do_anything(bus: Bus, tmp_path: Path) -> None:
    write_runtime(
        tmp_path,
        Runtime(pid=1, nats_url=bus.credentials.admin_url(bus.server.url), clickhouse_url="", started_at=0),
    )
    assert stat.S_IMODE(os.stat(tmp_path / "runtime.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(bus.credentials.config_file).st_mode) == 0o600
    admin = await connect(bus.credentials.admin_url(bus.server.url), name="test-admin-url")
    try:
        assert await _published(admin.jetstream(), event_subject(EventKind.SEARCH_COMPLETED, "voice"))
    finally:
        await admin.close()


def test_plaintext_credentials_off_loopback_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {"nats_user": "gateway", "nats_password": "pw"}
    with pytest.raises(SettingsError) as plain:
        load_settings(SharedSettings, nats_url="nats://nats.prod:4222", **base)
    assert "plain text" in str(plain.value) and "\n" not in str(plain.value)
    assert (
        load_settings(SharedSettings, nats_url="nats://127.0.0.1:4222", **base).nats_auth().user == "gateway"
    )
    assert load_settings(SharedSettings, nats_url="tls://nats.prod:4222", **base).nats_user == "gateway"
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked here")
    with_tls = load_settings(SharedSettings, nats_url="nats://nats.prod:4222", nats_tls_ca_file=ca, **base)
    assert with_tls.nats_auth().tls
    monkeypatch.setenv("EVERTUNE_NATS_TLS_CA_FILE", str(tmp_path / "missing.pem"))
    with pytest.raises(SettingsError, match=r"EVERTUNE_NATS_TLS_CA_FILE.*not a readable file"):
        load_settings(SharedSettings)
    monkeypatch.delenv("EVERTUNE_NATS_TLS_CA_FILE")
    with pytest.raises(SettingsError, match="EVERTUNE_NATS_PASSWORD"):
        load_settings(SharedSettings, nats_user="gateway")


async def test_an_unloadable_tls_file_is_one_line(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    with pytest.raises(SettingsError) as err:
        await connect("nats://127.0.0.1:1", name="test-tls", auth=NatsAuth(tls_ca_file=ca))
    assert "cannot be loaded" in str(err.value) and "\n" not in str(err.value)


async def test_a_refused_publish_reaches_the_error_callback_as_a_permissions_violation(bus: Bus) -> None:
    errors: list[str] = []

    async def record(err: Exception) -> None:
        errors.append(str(err))

    gateway = await nats.connect(
        bus.server.url,
        user="gateway",
        password=bus.credentials.services["gateway"].password,
        error_cb=record,
    )
    try:
        await gateway.publish(event_subject(EventKind.SEARCH_COMPLETED, "voice"), b"forged")
        await gateway.flush()
        for _ in range(50):
            if errors:
                break
            await asyncio.sleep(0.02)
    finally:
        await gateway.close()
    assert any("permissions violation" in e.lower() for e in errors), errors


async def test_mutual_tls_with_the_generated_users(tmp_path: Path) -> None:
    credentials = generate(tmp_path / "nats")
    cert, key = self_signed(tmp_path)
    config = tmp_path / "tls.conf"
    tls_block = f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{cert}", verify: true }}'
    config.write_text(f'include "nats/{credentials.config_file.name}"\n{tls_block}\n')  # relative to it
    server = EmbeddedNats(tmp_path / "nats", config=config)
    await server.start()
    try:
        gateway = credentials.services["gateway"]
        mutual = NatsAuth(
            gateway.user, gateway.password, tls_ca_file=cert, tls_cert_file=cert, tls_key_file=key
        )
        client = await connect(server.url, name="test-mtls", auth=mutual)
        assert client.is_connected
        await client.close()
        for refused in (gateway, NatsAuth(gateway.user, gateway.password, tls_ca_file=cert)):
            with pytest.raises(BusUnavailable) as err:  # no TLS; TLS without a client certificate
                await connect(server.url, name="test-no-mtls", connect_timeout_s=2, auth=refused)
            assert "\n" not in str(err.value) and gateway.password not in str(err.value)
    finally:
        await server.stop()


# --- reading: each service reads only the streams and buckets its job needs ------------------------

#: How long a refused JetStream API request waits for the answer that never comes.
REFUSED_TIMEOUT_S = 0.5


@dataclass
class Login:
    """A service's user logged in, with every asynchronous error the server sent it."""

    nc: Client
    errors: list[str]

    def js(self, timeout_s: float = 5.0) -> JetStreamContext:
        return self.nc.jetstream(timeout=timeout_s)

    def violations(self) -> list[str]:
        return [e for e in self.errors if "permissions violation" in e.lower()]


@contextlib.asynccontextmanager
async def login(bus: Bus, user: str) -> AsyncIterator[Login]:
    errors: list[str] = []

    async def record(err: Exception) -> None:
        errors.append(str(err))

    auth = bus.credentials.admin if user == "admin" else bus.credentials.services[user]
    nc = await nats.connect(
        bus.server.url,
        user=auth.user,
        password=auth.password,
        error_cb=record,
        inbox_prefix=inbox_prefix(auth.user),
    )
    try:
        yield Login(nc, errors)
    finally:
        await nc.close()


async def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def _assert_refused(user: Login, attempt: Awaitable[object], subject: str) -> None:
    """`attempt` fails, and the server says why: a permissions violation for `subject`."""
    with pytest.raises((TimeoutError, nats.errors.Error)):
        await attempt
    await _until(lambda: any(subject.lower() in v.lower() for v in user.violations()), timeout_s=2.0)


def _violations_in_log(bus: Bus) -> list[str]:
    return [line for line in bus.server.log_file.read_text().splitlines() if "Violation" in line]


async def _seed(bus: Bus) -> None:
    """What the services find on the bus: telemetry, events of every kind, a job, every bucket."""
    async with login(bus, "admin") as admin:
        js = admin.js()
        await js.publish("evertune.telemetry.voice", b"record")
        for kind in EventKind:
            await js.publish(event_subject(kind, "voice"), kind.value.encode())
        await js.publish("evertune.jobs.cpu", b"job")
        for bucket in ("endpoints", "deployments", "routes", "requests"):
            await (await js.key_value(bucket)).put("voice.stable", bucket.encode())


def _ordered(user: Login, stream: str, subject: str) -> Awaitable[object]:
    return user.js(REFUSED_TIMEOUT_S).subscribe(subject, stream=stream, ordered_consumer=True)


def _durable(user: Login, stream: str, subject: str, durable: str = "sneak") -> Awaitable[object]:
    return user.js(REFUSED_TIMEOUT_S).pull_subscribe(subject, durable=durable, stream=stream)


async def _kv_get(user: Login, bucket: str) -> object:
    kv = await user.js(REFUSED_TIMEOUT_S).key_value(bucket)  # looking a bucket up is not reading it
    return await kv.get("voice.stable")


async def _kv_watch(user: Login, bucket: str) -> object:
    kv = await user.js(REFUSED_TIMEOUT_S).key_value(bucket)
    return await kv.watchall()


#: (service, what it tries, how, the API subject refused). The pairs that matter: the gateway reads
#: no tenant's events, trials or state; the runner no telemetry; the profiler no route table and
#: no events beyond drift.detected.
READ_REFUSALS: list[tuple[str, str, Callable[[Login], Awaitable[object]], str]] = [
    (
        "gateway",
        "an EVENTS watch",
        lambda u: _ordered(u, "EVENTS", "evertune.events.>"),
        "$JS.API.CONSUMER.CREATE.EVENTS",
    ),
    (
        "gateway",
        "a durable on EVENTS (trial reports)",
        lambda u: _durable(u, "EVENTS", "evertune.events.trial.completed.>"),
        "$JS.API.CONSUMER.INFO.EVENTS.sneak",
    ),
    (
        "gateway",
        "a durable on TELEMETRY",
        lambda u: _durable(u, "TELEMETRY", "evertune.telemetry.>"),
        "$JS.API.CONSUMER.INFO.TELEMETRY.sneak",
    ),
    (
        "gateway",
        "a get from endpoints",
        lambda u: _kv_get(u, "endpoints"),
        "$JS.API.STREAM.MSG.GET.KV_endpoints",
    ),
    (
        "gateway",
        "a watch of deployments",
        lambda u: _kv_watch(u, "deployments"),
        "$JS.API.CONSUMER.CREATE.KV_deployments",
    ),
    (
        "runner",
        "the sink's durable on TELEMETRY",
        lambda u: _durable(u, "TELEMETRY", "evertune.telemetry.>", "profiler-sink"),
        "$JS.API.CONSUMER.INFO.TELEMETRY.profiler-sink",
    ),
    (
        "runner",
        "a TELEMETRY watch",
        lambda u: _ordered(u, "TELEMETRY", "evertune.telemetry.>"),
        "$JS.API.CONSUMER.CREATE.TELEMETRY",
    ),
    (
        "runner",
        "an EVENTS watch",
        lambda u: _ordered(u, "EVENTS", "evertune.events.>"),
        "$JS.API.CONSUMER.CREATE.EVENTS",
    ),
    ("profiler", "a get from routes", lambda u: _kv_get(u, "routes"), "$JS.API.STREAM.MSG.GET.KV_routes"),
    ("profiler", "a watch of routes", lambda u: _kv_watch(u, "routes"), "$JS.API.CONSUMER.CREATE.KV_routes"),
    (
        "profiler",
        "its drift durable on every event",
        lambda u: _durable(u, "EVENTS", "evertune.events.>", "profiler-drift"),
        "$JS.API.CONSUMER.CREATE.EVENTS.profiler-drift.evertune.events.>",
    ),
    (
        "profiler",
        "the deployer's durable on EVENTS",
        lambda u: _durable(u, "EVENTS", "evertune.events.search.completed.>", "deployer-search-completed"),
        "$JS.API.CONSUMER.INFO.EVENTS.deployer-search-completed",
    ),
    (
        "sla-monitor",
        "a durable on JOBS",
        lambda u: _durable(u, "JOBS", "evertune.jobs.cpu", "runner-cpu"),
        "$JS.API.CONSUMER.INFO.JOBS.runner-cpu",
    ),
    ("sla-monitor", "a get from routes", lambda u: _kv_get(u, "routes"), "$JS.API.STREAM.MSG.GET.KV_routes"),
    (
        "searcher",
        "a TELEMETRY watch",
        lambda u: _ordered(u, "TELEMETRY", "evertune.telemetry.>"),
        "$JS.API.CONSUMER.CREATE.TELEMETRY",
    ),
    (
        "searcher",
        "a get from requests",
        lambda u: _kv_get(u, "requests"),
        "$JS.API.STREAM.MSG.GET.KV_requests",
    ),
    (
        "deployer",
        "a durable on TELEMETRY",
        lambda u: _durable(u, "TELEMETRY", "evertune.telemetry.>"),
        "$JS.API.CONSUMER.INFO.TELEMETRY.sneak",
    ),
]


@pytest.mark.parametrize(
    ("service", "attempt", "subject"),
    [(service, attempt, subject) for service, _, attempt, subject in READ_REFUSALS],
    ids=[f"{service}: {what}" for service, what, _, _ in READ_REFUSALS],
)
async def test_a_service_cannot_read_what_its_job_does_not_need(
    bus: Bus, service: str, attempt: Callable[[Login], Awaitable[object]], subject: str
) -> None:
    await _seed(bus)
    async with login(bus, service) as user:
        await _assert_refused(user, attempt(user), subject)


@pytest.mark.parametrize("service", SERVICES)
async def test_no_service_deletes_purges_or_reconfigures_a_stream(bus: Bus, service: str) -> None:
    """Deleting or purging a stream is the operator's; updating one only the deployer's (an update
    can make a stream republish or source another: a read of anything)."""
    async with login(bus, service) as user:
        js = user.js(REFUSED_TIMEOUT_S)
        refusals = [
            _assert_refused(user, js.delete_stream("EVENTS"), "$JS.API.STREAM.DELETE.EVENTS"),
            _assert_refused(user, js.purge_stream("TELEMETRY"), "$JS.API.STREAM.PURGE.TELEMETRY"),
            _assert_refused(user, js.account_info(), "$JS.API.INFO"),
        ]
        if service != "deployer":
            events = next(s for s in load_definitions().streams if s.name == "EVENTS").config(1)
            leak = replace(events, republish=RePublish(src=">", dest="_INBOX.leak.>"))
            refusals.append(_assert_refused(user, js.update_stream(leak), "$JS.API.STREAM.UPDATE.EVENTS"))
            # nor can a create do it: the server refuses to change a stream that exists
            with pytest.raises(nats.js.errors.BadRequestError, match="different configuration"):
                await js.add_stream(leak)
        await asyncio.gather(*refusals)


@pytest.mark.parametrize("service", SERVICES)
async def test_a_service_cannot_gather_every_services_status(bus: Bus, service: str) -> None:
    """The micro API's `$SRV.STATS` carries each service's status: services answer it (the CLI
    asks it as the admin), none asks it."""
    async with login(bus, service) as user:
        await user.nc.publish("$SRV.STATS", b"", reply=user.nc.new_inbox())
        await user.nc.flush()
        await _until(lambda: any("$srv.stats" in v.lower() for v in user.violations()), timeout_s=2.0)


async def test_a_service_cannot_read_what_others_fetch_through_their_inboxes(bus: Bus) -> None:
    async with login(bus, "gateway") as gateway, login(bus, "profiler") as profiler:
        seen: list[bytes] = []

        async def sniff(msg: Msg) -> None:
            seen.append(msg.data)

        await gateway.nc.subscribe("_INBOX.>", cb=sniff)
        await gateway.nc.flush()
        await gateway.js().publish("evertune.telemetry.voice", b"a tenant's record")
        sub = await profiler.js().pull_subscribe(
            "evertune.telemetry.>", durable="profiler-sink", stream="TELEMETRY"
        )
        assert [m.data for m in await sub.fetch(1, timeout=5)] == [b"a tenant's record"]
        # the positive signal: the server refused the sniffing subscription (so it never held one
        # to deliver on), and a round trip after the fetch has read whatever it had sent the gateway
        await _until(lambda: any('"_inbox.>"' in v.lower() for v in gateway.violations()), timeout_s=5.0)
        await gateway.nc.flush()
        assert b"a tenant's record" not in seen


# --- ... and can still do all of its job ------------------------------------------------------------


async def _consume(
    js: JetStreamContext, spec: ConsumerSpec, count: int, handler: Handler | None = None
) -> None:
    """Run a durable consumer (the services' own class) until `count` messages are acked or poisoned."""

    async def ok(_: Msg) -> None:
        return None

    stop = asyncio.Event()
    consumer = DurableConsumer(js, spec, handler or ok, source="test")
    running = asyncio.create_task(consumer.run(stop))
    try:
        await _until(lambda: consumer.stats.acked + consumer.stats.poisoned >= count or running.done())
    finally:
        stop.set()
        await running
    assert consumer.stats.acked + consumer.stats.poisoned == count, consumer.stats


async def _follow(bus: Bus, user: Login, bucket: str) -> dict[str, bytes | None]:
    """Load `bucket` as the services do (`KvFollower`), then see a change as it happens."""
    keys: dict[str, bytes | None] = {}
    follower = KvFollower(user.js(), user.nc, bucket, keys.__setitem__)
    await follower.load()
    stop = asyncio.Event()
    running = asyncio.create_task(follower.run(stop))
    try:
        async with login(bus, "admin") as admin:  # the deployer's write
            await (await admin.js().key_value(bucket)).put("voice.canary", b"new")
        await _until(lambda: keys.get("voice.canary") == b"new")
    finally:
        stop.set()
        await running
    return keys


async def _gateway_job(bus: Bus, user: Login) -> None:
    js = user.js()
    await js.publish("evertune.telemetry.voice", b"record")
    assert (await _follow(bus, user, "routes"))["voice.stable"] == b"routes"


async def _profiler_job(bus: Bus, user: Login) -> None:
    js = user.js()
    await _consume(
        js, ConsumerSpec("TELEMETRY", "profiler-sink", "evertune.telemetry.>", fetch_timeout_s=1), 1
    )
    assert (await js.consumer_info("TELEMETRY", "profiler-sink")).num_pending == 0  # the metrics' gauge

    async def poison(_: Msg) -> None:
        raise PoisonMessage("undecodable")  # terminated and reported, as any durable may

    drift = ConsumerSpec("EVENTS", "profiler-drift", "evertune.events.drift.detected.>", fetch_timeout_s=1)
    await _consume(js, drift, 1, poison)
    deployments = await Bucket.open(js, "deployments")
    assert await deployments.keys() == ["voice.stable"]
    assert (await deployments.get("voice.stable")) is not None
    await js.publish(event_subject(EventKind.PROFILE_READY, "voice"), b"profile")


async def _sla_monitor_job(bus: Bus, user: Login) -> None:
    js = user.js()
    await _consume(js, ConsumerSpec("TELEMETRY", "sla-monitor", "evertune.telemetry.>", fetch_timeout_s=1), 1)
    assert (await _follow(bus, user, "endpoints"))["voice.stable"] == b"endpoints"
    profiles: list[bytes] = []

    async def on_profile(msg: Msg) -> None:
        profiles.append(msg.data)

    sub = await js.subscribe(
        "evertune.events.profile.ready.*",
        stream="EVENTS",
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT),
        cb=on_profile,
    )
    await _until(lambda: profiles == [b"profile.ready"])
    await sub.unsubscribe()
    await js.publish(event_subject(EventKind.SLA_BREACH, "voice"), b"breach")


async def _searcher_job(bus: Bus, user: Login) -> None:
    js = user.js()
    for name, kind in (
        ("trials", "trial.completed"),
        ("profiles", "profile.ready"),
        ("deletions", "endpoint.deleted"),
    ):
        await _consume(
            js, ConsumerSpec("EVENTS", f"searcher-{name}", f"evertune.events.{kind}.*", fetch_timeout_s=1), 1
        )
    endpoints, deployments = await Bucket.open(js, "endpoints"), await Bucket.open(js, "deployments")
    assert (await endpoints.get("voice.stable")) is not None
    assert (await deployments.get("voice.stable")) is not None
    async with deployments.watch("voice.*") as entries:  # the winner's rollout
        assert (await anext(entries)) is not None
    events: list[str] = []

    async def on_event(msg: Msg) -> None:
        events.append(msg.subject)

    sub = await js.subscribe("evertune.events.*.*.voice", stream="EVENTS", ordered_consumer=True, cb=on_event)
    await _until(lambda: len(events) == len(EventKind))  # WatchSearch
    await sub.unsubscribe()
    ack = await js.publish("evertune.jobs.cpu", b"a job nobody takes")
    assert await js.delete_msg("JOBS", ack.seq)  # withdrawn
    await js.publish(event_subject(EventKind.SEARCH_COMPLETED, "voice"), b"done")


async def _runner_job(bus: Bus, user: Login) -> None:
    js = user.js()
    ended: list[bytes] = []

    async def on_ended(msg: Msg) -> None:
        ended.append(msg.data)

    await user.nc.subscribe("evertune.events.search.completed.>", cb=on_ended)
    tries: list[int] = []

    async def trial(_: Msg) -> None:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("engine did not start")  # nak'ed, delivered again
        await asyncio.sleep(0.5)  # long enough for in-progress acks

    spec = ConsumerSpec(
        "JOBS",
        "runner-cpu",
        "evertune.jobs.cpu",
        ack_wait_s=0.6,
        backoff_s=(0.1,),
        batch=1,
        fetch_timeout_s=1,
    )
    await _consume(js, spec, 1, trial)
    assert len(tries) == 2
    assert (await js.consumer_info("JOBS", "runner-cpu")).num_pending == 0
    await js.publish(event_subject(EventKind.TRIAL_COMPLETED, "voice"), b"report")
    async with login(bus, "admin") as admin:
        await admin.js().publish(event_subject(EventKind.SEARCH_COMPLETED, "voice"), b"search ended")
    await _until(lambda: ended == [b"search ended"])


async def _deployer_job(bus: Bus, user: Login) -> None:
    js = user.js()
    for durable, kind in (
        ("deployer-search-completed", "search.completed"),
        ("deployer-sla-breach", "sla.breach"),
    ):
        await _consume(js, ConsumerSpec("EVENTS", durable, f"evertune.events.{kind}.*", fetch_timeout_s=1), 1)
    # Promote-by-trial's lookup: a short-lived pull consumer on one endpoint's trial reports
    lookup = await js.pull_subscribe(
        event_subject(EventKind.TRIAL_COMPLETED, "voice"),
        stream="EVENTS",
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0),
    )
    assert (await lookup.consumer_info()).num_pending == 1
    assert [m.data for m in await lookup.fetch(1, timeout=5)] == [b"trial.completed"]
    await lookup.unsubscribe()
    # WatchEvents: an ordered consumer from a start time
    events: list[str] = []

    async def on_event(msg: Msg) -> None:
        events.append(msg.subject)

    since = datetime.now(UTC) - timedelta(minutes=5)
    config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since)
    sub = await js.subscribe(
        "evertune.events.>", stream="EVENTS", ordered_consumer=True, config=config, cb=on_event
    )
    await _until(lambda: len(events) == len(EventKind))
    await sub.unsubscribe()
    for name in ("endpoints", "deployments", "routes", "requests"):  # its state: read and written
        bucket = await Bucket.open(js, name)
        revision = await bucket.create("voice.canary", b"1")
        await bucket.update("voice.canary", b"2", revision=revision)
        assert (await bucket.get("voice.canary")) == Entry("voice.canary", b"2", revision + 1)
        assert await bucket.keys() == ["voice.canary", "voice.stable"]
        await bucket.delete("voice.canary")
    for kind in EVENT_KINDS["deployer"]:
        await js.publish(event_subject(kind, "voice"), b"x")
    # a changed definition is applied at its start: the deployer updates the stream
    definitions = load_definitions()
    changed = tuple(replace(s, description="changed") if s.name == "JOBS" else s for s in definitions.streams)
    report = await declare(js, replace(definitions, streams=changed))
    assert report.updated == ("JOBS",)


JOBS: dict[str, Callable[[Bus, Login], Awaitable[None]]] = {
    "gateway": _gateway_job,
    "profiler": _profiler_job,
    "sla-monitor": _sla_monitor_job,
    "searcher": _searcher_job,
    "runner": _runner_job,
    "deployer": _deployer_job,
}


@pytest.mark.parametrize("service", SERVICES)
async def test_each_service_does_its_whole_job_on_the_bus(bus: Bus, service: str) -> None:
    """Every read and write the service's code makes (its consumers, watches, gets, lookups, acks,
    naks, in-progress acks, poison reports, job withdrawals, KV writes), through the same helpers,
    as its own user: no permissions violation, in the client or in the server's log."""
    await _seed(bus)
    async with login(bus, service) as user:
        report = await declare(user.js(), load_definitions())  # `evertune run` declares at start
        assert report.unchanged and not report.created and not report.updated
        await JOBS[service](bus, user)
        await user.nc.flush()
        assert user.violations() == []
    assert _violations_in_log(bus) == []


@pytest.mark.parametrize("service", SERVICES)
async def test_each_service_declares_the_streams_on_a_fresh_nats(tmp_path: Path, service: str) -> None:
    """The first `evertune run` on an empty NATS creates every stream and bucket, whichever service
    it is."""
    credentials = generate(tmp_path / "nats")
    server = EmbeddedNats(tmp_path / "nats", config=credentials.config_file)
    await server.start()
    try:
        client = await connect(server.url, name=f"test-{service}", auth=credentials.services[service])
        try:
            report = await declare(client.jetstream(), load_definitions())
        finally:
            await client.close()
        assert sorted(report.created) == sorted(STREAMS)
    finally:
        await server.stop()


def test_the_table_names_every_declared_stream_and_no_service_has_the_whole_api() -> None:
    definitions = load_definitions()
    declared = {s.name for s in definitions.streams} | {f"KV_{b.bucket}" for b in definitions.buckets}
    assert set(STREAMS) == declared  # a new stream or bucket gets a row in the table
    for service in SERVICES:
        allowed = permissions_for(service).publish
        assert not [s for s in allowed if s.startswith(("$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$SRV."))], (
            service
        )
        assert set(READS[service]) <= declared
