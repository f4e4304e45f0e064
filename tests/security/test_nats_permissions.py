"""The bus is not trusted: a nats-server started with the configuration `evertune up` generates
(one user per service, scoped by `evertune.infra.bus.permissions`) lets each service do its job and
nothing else. The gateway cannot forge a `search.completed` (the forged-winner hole), nobody
without credentials gets in, and a wrong password is one line. Real nats-server, no mocks."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.errors import BusUnavailable, SettingsError
from evertune.infra.bus import connect, declare, load_definitions
from evertune.infra.bus.permissions import EVENT_KINDS, SERVICES
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
        routes = await gateway.jetstream().key_value("routes")
        assert (await routes.get("voice")).value == b"deployer's table"  # the gateway reads it
        with pytest.raises((TimeoutError, nats.errors.Error)):
            await routes.put("voice", b"forged table", validate_keys=True)
        assert (await routes.get("voice")).value == b"deployer's table"
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
