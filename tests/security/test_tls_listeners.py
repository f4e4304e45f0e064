"""TLS on every listener, mTLS as an option; plaintext credentials off loopback are refused (issue
16, "Authentication everywhere, one way").

Each of the deployer's gRPC, the searcher's gRPC, the gateway's HTTP and a service's metrics port
(`EVERTUNE_METRICS_TLS_*`, shared by every service), started for real on
127.0.0.1 with a certificate of a test CA (`tests/tls.py`): a client trusting the CA is served (with
its token or API key) and a plaintext one is not; with a client CA the port is mutual, and a client
without a certificate, or with one another CA signed, is refused while one the CA signed is served.
Off loopback, tokens or API keys without TLS refuse the start in one line naming the settings; the
TLS settings themselves are checked at start. The CLI presents its client certificate (flags, or
their variables).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import grpc
import pytest
from nats.aio.client import Client
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from evertune.deployer import DeployerService, DeployerSettings
from evertune.errors import SettingsError
from evertune.gateway import GatewayService, GatewaySettings
from evertune.infra.runtime import Service, ServiceContext
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import Store, migrate
from evertune.searcher import SearcherSettings
from evertune.v1 import endpoint_service_pb2 as deployer_pb
from evertune.v1 import endpoint_service_pb2_grpc as deployer_grpc
from evertune.v1 import search_service_pb2 as searcher_pb
from evertune.v1 import search_service_pb2_grpc as searcher_grpc
from tests.apps.cli.helpers import assert_one_line_error, cli_env, run_cli
from tests.deployer.conftest import TOKEN_OPERATOR, bearer, deployer_settings, start_stack, stop_stack
from tests.searcher.stack import make_searcher, running
from tests.tls import Pki, issued

SEARCHER_TOKENS = SecretStr(f"{TOKEN_OPERATOR} *")
GATEWAY_KEYS = SecretStr(f"{TOKEN_OPERATOR} *")
LISTENERS = ("deployer", "searcher", "gateway")  #: those that take credentials


class MetricsOnly(Service):
    """A service with nothing but its metrics port (every service serves it the same way)."""

    name: ClassVar[str] = "metrics-only"
    description: ClassVar[str] = "its metrics port"

    async def on_start(self, ctx: ServiceContext) -> None:
        await self.serve_metrics(ctx, host="127.0.0.1", port=0)


@dataclass(frozen=True)
class Caller:
    """What a client presents: no CA is plaintext; `cert`/`key` a client certificate."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


@dataclass(frozen=True)
class Served:
    address: str  #: host:port
    call: Callable[[Caller], Awaitable[None]]  #: one authenticated call; raises when refused


Serve = Callable[..., AbstractAsyncContextManager[Served]]


def _channel(address: str, caller: Caller) -> grpc.aio.Channel:
    if caller.ca is None:
        return grpc.aio.insecure_channel(address)
    return grpc.aio.secure_channel(
        address,
        grpc.ssl_channel_credentials(
            root_certificates=caller.ca.read_bytes(),
            private_key=caller.key.read_bytes() if caller.key else None,
            certificate_chain=caller.cert.read_bytes() if caller.cert else None,
        ),
    )


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return issued(tmp_path / "pki")


async def _get(where: str, caller: Caller, headers: dict[str, str]) -> None:
    """GET `where` (host:port/path) as `caller` (https when it trusts a CA); raises unless 2xx."""
    context: ssl.SSLContext | bool = False
    if caller.ca is not None:
        context = ssl.create_default_context(cafile=caller.ca)
        if caller.cert is not None:
            context.load_cert_chain(caller.cert, caller.key)
    timeout = aiohttp.ClientTimeout(total=5.0)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"{'https' if caller.ca else 'http'}://{where}", ssl=context, headers=headers) as got,
    ):
        got.raise_for_status()


@pytest.fixture(params=(*LISTENERS, "metrics"))
def serve(request: pytest.FixtureRequest, nc: Client, tmp_path: Path, searcher_model_dir: Path) -> Serve:
    """Start the listener named by the parameter with the given settings (TLS files), for one call
    at a time (the operator's token or API key)."""

    # the store only for the searcher (each test's store is a database of its own)
    store: Store | None = request.getfixturevalue("store") if request.param == "searcher" else None

    @asynccontextmanager
    async def deployer(**settings: Any) -> AsyncIterator[Served]:
        stack = await start_stack(nc, tmp_path / "deployer", **settings)

        async def call(caller: Caller) -> None:
            async with _channel(stack.address, caller) as channel:
                stub = deployer_grpc.EndpointServiceStub(channel)  # type: ignore[no-untyped-call]
                request = deployer_pb.ListEndpointsRequest(tenant="nobody")
                await stub.ListEndpoints(request, metadata=bearer(TOKEN_OPERATOR), timeout=5.0)

        try:
            yield Served(stack.address, call)
        finally:
            await stop_stack(stack)

    @asynccontextmanager
    async def searcher(**settings: object) -> AsyncIterator[Served]:
        assert store is not None
        await migrate(store)
        service = make_searcher(tmp_path, model_dir=searcher_model_dir, tokens=SEARCHER_TOKENS, **settings)

        async def call(caller: Caller) -> None:
            async with _channel(service.grpc.address, caller) as channel:
                stub = searcher_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
                request = searcher_pb.ListSearchesRequest()
                await stub.ListSearches(request, metadata=bearer(TOKEN_OPERATOR), timeout=5.0)

        async with running(service, nc, store):
            yield Served(service.grpc.address, call)

    @asynccontextmanager
    async def gateway(**settings: object) -> AsyncIterator[Served]:
        values: dict[str, object] = {
            "port": 0,
            "api_keys": GATEWAY_KEYS,
            "spool_path": tmp_path / "spool.bin",
            "tokenizer_dir": searcher_model_dir,
            **settings,
        }
        service = GatewayService(GatewaySettings(**values))  # type: ignore[arg-type]
        ctx = ServiceContext(shared=SharedSettings(data_dir=tmp_path), nc=nc, js=nc.jetstream(), store=None)
        await service.start(ctx)
        address = f"127.0.0.1:{service.port}"

        async def call(caller: Caller) -> None:
            await _get(f"{address}/v1/models", caller, dict(bearer(TOKEN_OPERATOR)))

        try:
            yield Served(address, call)
        finally:
            await service.stop(5.0)

    @asynccontextmanager
    async def metrics(**settings: Any) -> AsyncIterator[Served]:
        shared = SharedSettings(data_dir=tmp_path, **{f"metrics_{k}": v for k, v in settings.items()})
        service = MetricsOnly()
        await service.start(ServiceContext(shared=shared, nc=nc, js=nc.jetstream(), store=None))
        assert service.metrics_url().startswith("https://" if settings else "http://")

        async def call(caller: Caller) -> None:
            await _get(f"{service.listen()['metrics']}/metrics", caller, {})

        try:
            yield Served(service.listen()["metrics"], call)
        finally:
            await service.stop(5.0)

    starters: dict[str, Serve] = {
        "deployer": deployer,
        "searcher": searcher,
        "gateway": gateway,
        "metrics": metrics,
    }
    return starters[request.param]


async def assert_refused(served: Served, caller: Caller) -> None:
    """The call fails in the transport: the handshake or the connection, never an answer."""
    try:
        await served.call(caller)
    except grpc.aio.AioRpcError as err:
        assert err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), err
    except aiohttp.ClientResponseError as err:  # an HTTP answer: the transport let it through
        raise AssertionError(f"answered {err.status}") from None
    except (aiohttp.ClientError, TimeoutError):
        pass
    else:
        raise AssertionError(f"{caller} was served")


async def test_tls_serves_a_client_trusting_the_ca_and_refuses_plaintext(serve: Serve, pki: Pki) -> None:
    async with serve(tls_cert_file=pki.server_cert, tls_key_file=pki.server_key) as served:
        await assert_refused(served, Caller())
        await served.call(Caller(ca=pki.ca))


async def test_mutual_tls_needs_a_client_certificate_the_ca_signed(serve: Serve, pki: Pki) -> None:
    mutual = {"tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key, "tls_client_ca_file": pki.ca}
    async with serve(**mutual) as served:
        await assert_refused(served, Caller(ca=pki.ca))
        await assert_refused(served, Caller(ca=pki.ca, cert=pki.stranger_cert, key=pki.stranger_key))
        await assert_refused(served, Caller())
        await served.call(Caller(ca=pki.ca, cert=pki.client_cert, key=pki.client_key))


def _construct(listener: str, tmp_path: Path, **settings: object) -> object:
    """The service of `listener` with credentials (tokens, API keys) and `settings`, not started."""
    if listener == "deployer":
        return DeployerService(deployer_settings(tmp_path, **settings))
    if listener == "searcher":
        return make_searcher(tmp_path, tokens=SEARCHER_TOKENS, **settings)
    values: dict[str, object] = {"port": 0, "api_keys": GATEWAY_KEYS, **settings}
    return GatewayService(GatewaySettings(**values))  # type: ignore[arg-type]


PLAINTEXT = {
    # listener: (its host setting, what it names the credentials, the setting that allows plaintext)
    "deployer": ("grpc_host", "tokens", "allow_plaintext_tokens"),
    "searcher": ("grpc_host", "tokens", "allow_plaintext_tokens"),
    "gateway": ("host", "API keys", "allow_plaintext_keys"),
}
PREFIX = {"deployer": "EVERTUNE_DEPLOYER_", "searcher": "EVERTUNE_SEARCHER_", "gateway": "EVERTUNE_GATEWAY_"}


@pytest.mark.parametrize("listener", LISTENERS)
def test_plaintext_credentials_off_loopback_refuse_the_start(listener: str, tmp_path: Path) -> None:
    host, credentials, allow = PLAINTEXT[listener]
    prefix = PREFIX[listener]
    with pytest.raises(SettingsError) as refused:
        _construct(listener, tmp_path, **{host: "0.0.0.0"})
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"invalid setting {prefix}TLS_CERT_FILE: {credentials} would cross")
    assert f"{prefix}{host.upper()}=0.0.0.0" in message
    assert f"{prefix}{allow.upper()}=true" in message
    pki = issued(tmp_path / "pki")
    tls = {"tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key}
    _construct(listener, tmp_path, **{host: "0.0.0.0"}, **tls)  # TLS: fine
    _construct(listener, tmp_path, **{host: "0.0.0.0", allow: True})  # TLS in front: fine
    _construct(listener, tmp_path, **{host: "127.0.0.1"})  # loopback: fine


SETTINGS: dict[str, type[BaseSettings]] = {
    "deployer": DeployerSettings,
    "searcher": SearcherSettings,
    "gateway": GatewaySettings,
}


@pytest.mark.parametrize("listener", LISTENERS)
def test_tls_settings_are_checked_at_start(listener: str, tmp_path: Path) -> None:
    prefix, cls = PREFIX[listener], SETTINGS[listener]
    pki = issued(tmp_path / "pki")
    with pytest.raises(SettingsError, match=f"set both {prefix}TLS_CERT_FILE and {prefix}TLS_KEY_FILE"):
        load_settings(cls, tls_cert_file=pki.server_cert)
    with pytest.raises(SettingsError, match=f"{prefix}TLS_CLIENT_CA_FILE \\(mutual TLS\\) needs"):
        load_settings(cls, tls_client_ca_file=pki.ca)
    tls = {"tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key}
    cases = [
        ({**tls, "tls_cert_file": tmp_path / "missing.pem"}, "TLS_CERT_FILE", "No such file"),
        ({**tls, "tls_key_file": pki.client_key}, "TLS_CERT_FILE", "KEY_VALUES_MISMATCH"),
        ({**tls, "tls_client_ca_file": tmp_path / "missing.pem"}, "TLS_CLIENT_CA_FILE", "No such file"),
        ({**tls, "tls_client_ca_file": pki.server_key}, "TLS_CLIENT_CA_FILE", ""),
    ]
    for settings, setting, reason in cases:
        with pytest.raises(SettingsError) as refused:
            _construct(listener, tmp_path, **settings)
        message = str(refused.value)
        assert "\n" not in message and message.startswith(f"invalid setting {prefix}{setting}: "), message
        assert reason in message


COMMANDS = {"deployer": ("endpoints", "list"), "searcher": ("search", "list")}


@pytest.mark.parametrize("serve", ["deployer", "searcher"], indirect=True)
async def test_the_cli_presents_its_client_certificate(
    serve: Serve, pki: Pki, request: pytest.FixtureRequest
) -> None:
    listener = request.node.callspec.params["serve"]
    mutual = {"tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key, "tls_client_ca_file": pki.ca}
    async with serve(**mutual) as served:
        command = (*COMMANDS[listener], "--address", served.address, "--json")
        env = cli_env(EVERTUNE_TOKEN=TOKEN_OPERATOR)
        flags = (
            "--tls-ca",
            str(pki.ca),
            "--tls-cert",
            str(pki.client_cert),
            "--tls-key",
            str(pki.client_key),
        )
        by_flags = await asyncio.to_thread(run_cli, *command, *flags, env=env)
        assert by_flags.returncode == 0, by_flags.stderr
        variables = cli_env(
            EVERTUNE_TOKEN=TOKEN_OPERATOR,
            EVERTUNE_TLS_CA_FILE=str(pki.ca),
            EVERTUNE_TLS_CERT_FILE=str(pki.client_cert),
            EVERTUNE_TLS_KEY_FILE=str(pki.client_key),
        )
        by_variables = await asyncio.to_thread(run_cli, *command, env=variables)
        assert by_variables.returncode == 0, by_variables.stderr
        without = await asyncio.to_thread(run_cli, *command, "--tls-ca", str(pki.ca), env=env)
        assert_one_line_error(without, "UNAVAILABLE")
        half = await asyncio.to_thread(run_cli, *command, *flags[:4], env=env)
        assert_one_line_error(half, "--tls-cert and --tls-key")
        missing = await asyncio.to_thread(run_cli, *command, "--tls-ca", str(pki.ca / "nope"), env=env)
        assert_one_line_error(missing, "cannot read --tls-ca")


def test_the_metrics_ports_tls_settings_are_checked(tmp_path: Path, pki: Pki) -> None:
    pair = "both EVERTUNE_METRICS_TLS_CERT_FILE and EVERTUNE_METRICS_TLS_KEY_FILE"
    with pytest.raises(SettingsError, match=pair):
        load_settings(SharedSettings, data_dir=tmp_path, metrics_tls_cert_file=pki.server_cert)
    with pytest.raises(SettingsError, match="EVERTUNE_METRICS_TLS_CLIENT_CA_FILE") as refused:
        load_settings(SharedSettings, data_dir=tmp_path, metrics_tls_client_ca_file=pki.ca)
    assert "\n" not in str(refused.value)
