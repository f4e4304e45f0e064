"""The production NATS configuration, for real: `evertune nats credentials` writes the users,
infra/nats/tls-certificates.sh the certificates, and three nats-servers started from
infra/nats/production.conf (which includes infra/nats/cluster.conf, as the Kubernetes StatefulSet
runs it) form a JetStream cluster with TLS on the client connections and mutual TLS on the routes.
Each service logs in as `evertune run` would (its settings: user, password, the CA) and may publish
what the permissions table says and nothing else; no credentials, a plain connection, another CA
and a rotated password are refused. Real nats-server and openssl, no mocks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nats
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from nats.aio.client import Client

from evertune.apps.cli import main
from evertune.apps.harness.waiting import eventually
from evertune.errors import BusUnavailable
from evertune.infra.bus import connect, declare, load_definitions
from evertune.infra.events import EventKind, event_subject
from evertune.infra.nats_auth import (
    CLUSTER_AUTHORIZATION,
    USERS,
    cluster_authorization,
    password_file,
    write_cluster_credentials,
)
from evertune.infra.nats_server import find_binary, free_port
from evertune.infra.settings import NatsAuth, SharedSettings, load_settings
from tests.checkout import INFRA
from tests.tls import self_signed

SCRIPT = INFRA / "nats" / "tls-certificates.sh"
NODES = 3
ACK_TIMEOUT_S = 1.0


def _passwords(folder: Path) -> dict[str, str]:
    return {user: (folder / password_file(user)).read_text() for user in USERS}


def test_credentials_command_writes_private_files_and_prints_no_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "secrets"
    assert main(["nats", "credentials", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    files = {CLUSTER_AUTHORIZATION, *(password_file(u) for u in USERS)}
    assert {p.name for p in out.iterdir()} == files  # no temporary file left behind
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert {stat.S_IMODE((out / f).stat().st_mode) for f in files} == {0o600}
    passwords = _passwords(out)
    assert len(set(passwords.values())) == len(USERS) and all(len(p) >= 40 for p in passwords.values())
    assert not any(p in printed.out + printed.err for p in passwords.values())
    assert (out / CLUSTER_AUTHORIZATION).read_text() == cluster_authorization(passwords)  # nats_auth's block

    # Again: every password kept, the include rewritten (a changed permissions table reaches it).
    (out / CLUSTER_AUTHORIZATION).write_text("stale")
    assert main(["nats", "credentials", "--out", str(out)]) == 0
    assert _passwords(out) == passwords
    assert (out / CLUSTER_AUTHORIZATION).read_text() == cluster_authorization(passwords)
    # --rotate: that user's password only.
    assert main(["nats", "credentials", "--out", str(out), "--rotate", "gateway"]) == 0
    rotated = _passwords(out)
    assert rotated["gateway"] != passwords["gateway"]
    assert {u: p for u, p in rotated.items() if u != "gateway"} == {
        u: p for u, p in passwords.items() if u != "gateway"
    }
    assert "gateway" in capsys.readouterr().out
    # Refusals are one line: an unknown user; a hand-edited password with a newline (the Secret
    # would carry it into the service's environment).
    assert main(["nats", "credentials", "--out", str(out), "--rotate", "gatewy"]) == 1
    (out / password_file("runner")).write_text(rotated["runner"] + "\n")
    assert main(["nats", "credentials", "--out", str(out)]) == 1
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "gatewy" in errors[0] and "--rotate runner" in errors[1]
    assert rotated["runner"] not in errors[1]


def _overlay_nats_hosts() -> set[str]:
    """The host names the Kubernetes manifests reach NATS by: the services' URL and the routes."""
    shared = (INFRA / "kubernetes" / "base" / "config" / "shared.env").read_text()
    [urls] = re.findall(r"^EVERTUNE_NATS_URL=(.*)$", shared, re.MULTILINE)
    statefulset = next(
        d
        for d in yaml.safe_load_all((INFRA / "kubernetes" / "base" / "nats" / "statefulset.yaml").read_text())
        if d["kind"] == "StatefulSet"
    )
    env = {e["name"]: e.get("value") for e in statefulset["spec"]["template"]["spec"]["containers"][0]["env"]}
    routes = env["NATS_ROUTES"].strip("[]").split(",")
    return {urlsplit(u.strip()).hostname or "" for u in [*urls.split(","), *routes]}


def _names(cert: Path) -> tuple[set[str], list[Any]]:
    certificate = x509.load_pem_x509_certificate(cert.read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    return {str(n) for n in names.get_values_for_type(x509.DNSName)}, list(usage)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl on the PATH")
def test_the_certificate_script_covers_every_name_the_manifests_use(tmp_path: Path) -> None:
    out = tmp_path / "secrets"
    subprocess.run(["sh", str(SCRIPT), str(out)], check=True, capture_output=True, timeout=60)
    files = ["nats-ca.crt", "nats-ca.key", "nats-server.crt", "nats-server.key"]
    assert sorted(p.name for p in out.iterdir()) == files
    assert {stat.S_IMODE((out / f).stat().st_mode) for f in files} == {0o600}
    names, usage = _names(out / "nats-server.crt")
    assert _overlay_nats_hosts() <= names and "nats-2.nats.evertune.svc.cluster.local" in names
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usage)  # routes: both
    ca, first = (out / "nats-ca.crt").read_bytes(), (out / "nats-server.crt").read_bytes()
    # Again (a renewal): the same CA, a new certificate for the nodes; another namespace, more nodes.
    subprocess.run(["sh", str(SCRIPT), str(out), "tuning", "5"], check=True, capture_output=True, timeout=60)
    assert (out / "nats-ca.crt").read_bytes() == ca and (out / "nats-server.crt").read_bytes() != first
    names, _ = _names(out / "nats-server.crt")
    assert {"nats-4.nats", "nats-4.nats.tuning.svc.cluster.local"} <= names
    verify = ["openssl", "verify", "-CAfile", str(out / "nats-ca.crt"), str(out / "nats-server.crt")]
    assert subprocess.run(verify, capture_output=True, timeout=30).returncode == 0
    bad = subprocess.run(["sh", str(SCRIPT), str(out), "evertune", "three"], capture_output=True, timeout=30)
    assert bad.returncode == 2 and b"NODES must be a number" in bad.stderr


# -- three real nodes ---------------------------------------------------------------------------


@dataclass
class Node:
    name: str
    client_port: int
    cluster_port: int
    http_port: int
    process: asyncio.subprocess.Process | None = None

    def get(self, path: str) -> Any:
        """The monitoring endpoint's JSON (`/varz`, `/routez`)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=2) as reply:
            return json.load(reply)

    def healthy(self) -> bool:
        """The StatefulSet's startup probe: /healthz?js-enabled-only=true answers 200."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}/healthz?js-enabled-only=true", timeout=1
            ) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False


@dataclass
class Cluster:
    folder: Path  #: /etc/nats of the pods: production.conf, cluster.conf, authorization.conf
    secrets: Path  #: what the overlay's secretGenerator reads
    ca: Path
    nodes: list[Node] = field(default_factory=list)

    @property
    def urls(self) -> str:
        return ",".join(f"nats://127.0.0.1:{n.client_port}" for n in self.nodes)

    def settings(self, service: str, password: str | None = None) -> SharedSettings:
        """A service's settings as the manifests set them: its user, its password, the CA."""
        return load_settings(
            SharedSettings,
            nats_url=self.urls,
            nats_replicas=NODES,
            nats_user=service,
            nats_password=password or (self.secrets / password_file(service)).read_text(),
            nats_tls_ca_file=self.ca,
        )

    async def as_user(self, service: str, password: str | None = None) -> Client:
        settings = self.settings(service, password)
        return await connect(settings.nats_url, name=f"test-{service}", auth=settings.nats_auth())


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(CA, certificate, key): infra/nats/tls-certificates.sh's, or without openssl a self-signed one."""
    if shutil.which("openssl") is None:
        cert, key = self_signed(folder)
        return cert, cert, key
    subprocess.run(["sh", str(SCRIPT), str(folder)], check=True, capture_output=True, timeout=60)
    return folder / "nats-ca.crt", folder / "nats-server.crt", folder / "nats-server.key"


async def _start_server(
    config: Path, http_port: int, log: Path, variables: dict[str, str]
) -> asyncio.subprocess.Process:
    """A nats-server from `config` with `variables` in its environment (the config reads them)."""
    return await asyncio.create_subprocess_exec(
        str(find_binary()),
        *("--config", str(config), "--http_port", str(http_port), "--log", str(log)),
        env={**os.environ, **variables},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    secrets = tmp_path / "secrets"
    write_cluster_credentials(secrets)
    ca, cert, key = _certificates(secrets)
    folder = tmp_path / "etc-nats"
    folder.mkdir()
    for name in ("production.conf", "cluster.conf"):
        shutil.copy(INFRA / "nats" / name, folder / name)
    shutil.copy(secrets / CLUSTER_AUTHORIZATION, folder / "authorization.conf")
    nodes = [Node(f"nats-{i}", free_port(), free_port(), free_port()) for i in range(NODES)]
    routes = "[" + ", ".join(f"nats-route://127.0.0.1:{n.cluster_port}" for n in nodes) + "]"
    running = Cluster(folder, secrets, ca, nodes)
    try:
        for node in nodes:
            variables = {
                "NATS_SERVER_NAME": node.name,
                "NATS_LISTEN": f"127.0.0.1:{node.client_port}",
                "NATS_STORE_DIR": str(tmp_path / node.name),
                "NATS_CLUSTER_LISTEN": f"127.0.0.1:{node.cluster_port}",
                "NATS_ROUTES": routes,
                "NATS_TLS_CERT_FILE": str(cert),
                "NATS_TLS_KEY_FILE": str(key),
                "NATS_TLS_CA_FILE": str(ca),
            }
            node.process = await _start_server(
                folder / "production.conf", node.http_port, tmp_path / f"{node.name}.log", variables
            )
        for node in nodes:

            async def healthy(node: Node = node) -> bool:
                assert node.process is not None and node.process.returncode is None, (
                    tmp_path / f"{node.name}.log"
                ).read_text()[-2000:]
                return await asyncio.to_thread(node.healthy)

            await eventually(healthy, timeout_s=20, what=f"{node.name} healthy", every_s=0.1)
        yield running
    finally:
        for node in nodes:
            if node.process is not None and node.process.returncode is None:
                node.process.terminate()
                try:
                    await asyncio.wait_for(node.process.wait(), 10)
                except TimeoutError:
                    node.process.kill()
                    await node.process.wait()


async def _published(client: Client, subject: str) -> bool:
    """Whether a JetStream publish to `subject` was stored (acked); a refused one gets no ack."""
    try:
        await client.jetstream().publish(subject, b"x", timeout=ACK_TIMEOUT_S)
    except (TimeoutError, nats.errors.Error):
        return False
    return True


async def _refused(urls: str, auth: NatsAuth) -> str | None:
    """The one-line error of a login NATS refuses; None where it is let in. (A refused TLS handshake
    shows as the connect timeout running out, hence one server and a short timeout.)"""
    try:
        client = await connect(urls, name="test-refused", connect_timeout_s=1, auth=auth)
    except BusUnavailable as err:
        return str(err)
    await client.close()
    return None


async def test_three_nodes_from_production_conf_with_users_and_tls(cluster: Cluster) -> None:
    passwords = _passwords(cluster.secrets)
    async with contextlib.AsyncExitStack() as clients:

        async def logged_in(client: Client) -> Client:
            clients.push_async_callback(client.close)
            return client

        admin_auth = NatsAuth("admin", passwords["admin"], tls_ca_file=cluster.ca)
        admin = await logged_in(await connect(cluster.urls, name="test-admin", auth=admin_auth))
        # The cluster formed over its TLS routes: evertune's streams and buckets declare as R3.
        js = admin.jetstream()

        async def declared() -> bool:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await declare(js, load_definitions(), replicas=NODES)
                return True
            return False

        await eventually(declared, timeout_s=30, what="the streams declared R3", every_s=0.5)
        assert (await js.stream_info("TELEMETRY")).config.num_replicas == NODES
        for node in cluster.nodes:
            varz = await asyncio.to_thread(node.get, "/varz")
            assert varz["tls_required"] and varz["auth_required"]
            assert varz["cluster"]["tls_required"] and varz["cluster"]["tls_verify"]  # mutual TLS routes

        # Each service, logged in as `evertune run` would be, publishes what it owns and no more.
        gateway = await logged_in(await cluster.as_user("gateway"))
        deployer = await logged_in(await cluster.as_user("deployer"))
        assert await _published(gateway, "evertune.telemetry.voice")
        assert not await _published(gateway, event_subject(EventKind.SEARCH_COMPLETED, "voice"))
        assert not await _published(gateway, "$KV.routes.voice")
        assert await _published(deployer, event_subject(EventKind.DEPLOY_PROMOTED, "voice"))
        assert not await _published(deployer, "evertune.telemetry.voice")
        await (await deployer.jetstream().key_value("routes")).put("voice", b"deployer's table")

        async def table() -> bytes | None:  # a just-made R3 bucket may still be electing its leader
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                return (await (await gateway.jetstream().key_value("routes")).get("voice")).value
            return None

        assert (
            await eventually(table, timeout_s=15, what="the gateway reads the routes") == b"deployer's table"
        )

        # Refused, in one line and without the password: no credentials, a wrong password, the
        # right password over plain TCP (and so no TLS), a client that trusts another CA.
        gateway_password = passwords["gateway"]
        other_ca, _ = self_signed(cluster.folder.parent)
        first = cluster.urls.split(",")[0]
        for auth in (
            NatsAuth(tls_ca_file=cluster.ca),
            NatsAuth("gateway", "not-the-password", tls_ca_file=cluster.ca),
            NatsAuth("gateway", gateway_password),
            NatsAuth("gateway", gateway_password, tls_ca_file=other_ca),
        ):
            message = await _refused(first, auth)
            assert message is not None and "\n" not in message and gateway_password not in message
            if auth.tls_ca_file == other_ca:  # said as what it is, at once, not a timeout
                assert "failed the TLS handshake (unable to get local issuer certificate)" in message

        # A rotated password: `--rotate gateway`, the include reloaded by every node; the old one is
        # refused, the new one logs in, and the other services' connections carry on.
        assert main(["nats", "credentials", "--out", str(cluster.secrets), "--rotate", "gateway"]) == 0
        shutil.copy(cluster.secrets / CLUSTER_AUTHORIZATION, cluster.folder / "authorization.conf")
        for node in cluster.nodes:
            assert node.process is not None
            reload = await asyncio.create_subprocess_exec(
                str(find_binary()), "--signal", f"reload={node.process.pid}"
            )
            assert await reload.wait() == 0

        async def rotated() -> bool:
            old = NatsAuth("gateway", gateway_password, tls_ca_file=cluster.ca)
            return await _refused(first, old) is not None

        await eventually(rotated, timeout_s=10, what="the old gateway password refused", every_s=0.2)
        renewed = await logged_in(await cluster.as_user("gateway"))
        assert await _published(renewed, "evertune.telemetry.voice")
        assert deployer.is_connected
        assert await _published(deployer, event_subject(EventKind.DEPLOY_STARTED, "voice"))


async def test_a_node_without_the_certificate_cannot_join_as_a_route(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A nats-server that reaches the route port with plain cluster.conf (no TLS, no certificate) is
    not let into the cluster: the routes are mutual TLS."""
    port, cluster_port, http_port = free_port(), free_port(), free_port()
    first = cluster.nodes[0]
    variables = {
        "NATS_SERVER_NAME": "intruder",
        "NATS_LISTEN": f"127.0.0.1:{port}",
        "NATS_STORE_DIR": str(tmp_path / "intruder"),
        "NATS_CLUSTER_LISTEN": f"127.0.0.1:{cluster_port}",
        "NATS_ROUTES": f"[nats-route://127.0.0.1:{first.cluster_port}]",
    }
    intruder = await _start_server(
        INFRA / "nats" / "cluster.conf", http_port, tmp_path / "intruder.log", variables
    )
    try:
        log = tmp_path / f"{first.name}.log"  # the cluster fixture's, in this test's tmp_path

        async def refused() -> bool:  # the first node turned the intruder's route away
            return "Router connection closed: TLS Handshake Failure" in log.read_text()

        await eventually(refused, timeout_s=15, what="the intruder's route refused", every_s=0.2)
        routez = await asyncio.to_thread(first.get, "/routez")
        peers = {route.get("remote_name") for route in routez["routes"]}
        assert peers == {n.name for n in cluster.nodes[1:]}, peers
    finally:
        intruder.terminate()
        await intruder.wait()
