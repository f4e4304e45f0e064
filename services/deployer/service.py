"""The deployer service: the EndpointService gRPC API (with health and reflection), endpoint and
deployment state in KV, and the local serving backend. See docs/services/deployer.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

from evertune.deployer.api import SERVICE_NAME, EndpointApi
from evertune.deployer.auth import AuthInterceptor, TokenTable, parse_tokens
from evertune.deployer.backend_local import EngineFactory, LocalBackend, make_engine
from evertune.deployer.controller import Deployer
from evertune.deployer.server import DeployerGrpcServer, server_credentials
from evertune.deployer.settings import DeployerSettings
from evertune.deployer.state import State

from evertune.errors import InvalidArgument, SettingsError
from evertune.runtime import GrpcService, ServiceContext


def load_tokens(settings: DeployerSettings) -> TokenTable | None:
    """The token table from the token file and the TOKENS setting; None when neither has one.

    A bad file or entry is a one-line SettingsError naming the variable.
    """
    tokens: dict[str, str] = {}
    try:
        if settings.token_file is not None:
            try:
                text = settings.token_file.read_text()
            except OSError as err:
                raise SettingsError(
                    "invalid setting EVERTUNE_DEPLOYER_TOKEN_FILE: "
                    f"cannot read {settings.token_file}: {err.strerror}"
                ) from None
            tokens |= parse_tokens(text, source=str(settings.token_file))
        tokens |= parse_tokens(settings.tokens.get_secret_value(), source="EVERTUNE_DEPLOYER_TOKENS")
    except InvalidArgument as err:
        raise SettingsError(f"invalid deployer tokens: {err}") from None
    return TokenTable(tokens) if tokens else None


class DeployerService(GrpcService):
    name: ClassVar[str] = "deployer"
    description: ClassVar[str] = "Endpoints and deployments, progressive rollout, rollback"

    def __init__(self, settings: DeployerSettings, *, engine_factory: EngineFactory = make_engine) -> None:
        super().__init__(host=settings.grpc_host, port=settings.grpc_port)
        self.settings = settings
        self.engine_factory = engine_factory
        self.tokens = load_tokens(settings)
        if self.tokens is None and not settings.loopback_only and not settings.allow_unauthenticated:
            raise SettingsError(
                "invalid setting EVERTUNE_DEPLOYER_TOKEN_FILE: no tokens configured while "
                f"EVERTUNE_DEPLOYER_GRPC_HOST={settings.grpc_host} is not loopback "
                "(set tokens, bind 127.0.0.1, or EVERTUNE_DEPLOYER_ALLOW_UNAUTHENTICATED=true)"
            )
        credentials = (
            server_credentials(settings.tls_cert_file, settings.tls_key_file)
            if settings.tls_cert_file is not None and settings.tls_key_file is not None
            else None
        )
        self.deployer: Deployer | None = None
        self.server = DeployerGrpcServer(
            host=settings.grpc_host,
            port=settings.grpc_port,
            add_servicers=[self._add_api],
            service_names=[SERVICE_NAME],
            interceptors=[AuthInterceptor(self.tokens)],
            credentials=credentials,
            max_message_bytes=settings.max_message_bytes,
        )
        self.grpc = self.server

    def _add_api(self, server: Any) -> None:
        assert self.deployer is not None
        EndpointApi(self.deployer, stopping=self.stopping).add_to(server)

    async def on_start(self, ctx: ServiceContext) -> None:
        settings = self.settings
        state = await State.open(ctx.js, replicas=ctx.shared.nats_replicas)
        log_dir = settings.engine_log_dir or ctx.shared.data_dir.expanduser() / "deployer" / "engines"
        reports: list[Deployer] = []

        async def report(event: Any) -> None:
            if reports:
                await reports[0].on_engine_report(event)

        backend = LocalBackend(
            log_dir=log_dir,
            hardware_classes=settings.local_hardware_classes,
            report=report,
            health_interval_s=settings.health_interval_s,
            max_restarts=settings.max_restarts,
            restart_window_s=settings.restart_window_s,
            ready_timeout_s=settings.ready_timeout_s,
            engine_factory=self.engine_factory,
        )
        self.deployer = Deployer(
            state=state,
            backend=backend,
            ready_timeout_s=settings.ready_timeout_s,
            drain_timeout_s=settings.drain_timeout_s,
        )
        reports.append(self.deployer)
        if self.tokens is None:
            self.log.warning(
                "deployer API without authentication: no tokens configured",
                host=settings.grpc_host,
                loopback_only=settings.loopback_only,
            )
        await self.deployer.resume()
        try:
            await self.server.start()
        except BaseException:
            await self.deployer.close()
            raise
        self.log.info(
            "deployer serving",
            address=self.server.address,
            tls=self.server.tls,
            auth="tokens" if self.tokens is not None else "off",
        )

    async def on_stop(self) -> None:
        await self.server.stop(grace_s=self.grace_s)
        if self.deployer is not None:
            await self.deployer.close()

    def details(self) -> dict[str, Any]:
        if self.deployer is None:
            return {}
        return {"deployments_running": len(self.deployer.backend.running())}
