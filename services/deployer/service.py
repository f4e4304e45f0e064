"""The deployer service: the EndpointService gRPC API (with health and reflection), endpoint and
deployment state in KV, progressive rollouts analysed over the telemetry store, the `search.completed`
and `sla.breach` consumers, and the local or kubernetes serving backend. See docs/services/deployer.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg

from evertune.deployer.api import SERVICE_NAME, EndpointApi
from evertune.deployer.backend import ServingBackend
from evertune.deployer.backend_kubernetes import KubernetesBackend, api_client_from_config
from evertune.deployer.backend_local import LocalBackend
from evertune.deployer.deployments import Deployments
from evertune.deployer.lifecycle import Lifecycle
from evertune.deployer.metrics import DeployerMetrics, EngineReplica
from evertune.deployer.model_roots import ModelRoots
from evertune.deployer.settings import DeployerSettings
from evertune.deployer.state import State
from evertune.deployer.stats import DeployerStats
from evertune.deployer.telemetry import Telemetry
from evertune.deployer.winner_check import StoredWinners
from evertune.deployer.wiring import wiring
from evertune.deployer.workspace import Workspace
from evertune.domain.engines import EngineFactory, make_engine
from evertune.errors import InvalidArgument, SettingsError
from evertune.infra.bus import DurableConsumer, PoisonMessage
from evertune.infra.bus.wiring import durable_consumers
from evertune.infra.outbound import OutboundPolicy
from evertune.infra.runtime import GrpcServer, GrpcService, ServiceContext
from evertune.infra.runtime.auth import AuthInterceptor, TokenSource, load_tokens
from evertune.infra.runtime.metrics import FunctionCollector
from evertune.infra.runtime.tls import Listener, ServerTls, check_exposure, tls_mode
from evertune.v1 import events_pb2


def deployer_tokens(settings: DeployerSettings) -> TokenSource | None:
    """The deployer's token table (`evertune.infra.runtime.auth.load_tokens`); None when it has none."""
    return load_tokens(
        token_file=settings.token_file,
        tokens=settings.tokens.get_secret_value(),
        file_setting="EVERTUNE_DEPLOYER_TOKEN_FILE",
        tokens_setting="EVERTUNE_DEPLOYER_TOKENS",
    )


def _event(msg: Msg) -> events_pb2.Event:
    try:
        return events_pb2.Event.FromString(msg.data)
    except DecodeError as err:
        raise PoisonMessage(f"not an Event: {err}") from None


class DeployerService(GrpcService):
    name: ClassVar[str] = "deployer"
    description: ClassVar[str] = "Endpoints and deployments, progressive rollout, rollback"
    #: The canary analysis reads telemetry from the store.
    needs_store: ClassVar[bool] = True

    def __init__(self, settings: DeployerSettings, *, engine_factory: EngineFactory = make_engine) -> None:
        super().__init__(host=settings.grpc_host, port=settings.grpc_port)
        self.settings = settings
        self.engine_factory = engine_factory
        self._outbound = OutboundPolicy()  #: where alert routes' URLs may point (set at start)
        self.tokens = deployer_tokens(settings)
        try:
            self.model_roots = ModelRoots.parse(settings.model_roots, allow_hub=settings.allow_hub_models)
        except InvalidArgument as err:
            raise SettingsError(f"invalid setting EVERTUNE_DEPLOYER_MODEL_ROOTS: {err}") from None
        self.tls = ServerTls.of(settings, "EVERTUNE_DEPLOYER_")
        check_exposure(
            Listener("EVERTUNE_DEPLOYER_", "GRPC_HOST", "tokens", "TOKEN_FILE", "ALLOW_PLAINTEXT_TOKENS"),
            host=settings.grpc_host,
            has_credentials=self.tokens is not None,
            tls=self.tls is not None,
            allow_unauthenticated=settings.allow_unauthenticated,
            allow_plaintext=settings.allow_plaintext_tokens,
        )
        self.work: Workspace | None = None  #: KV state, the backend, background work (once started)
        self.deployments: Deployments | None = None  #: Promote, Rollback, winners, breaches, canaries
        self.lifecycle: Lifecycle | None = None  #: endpoints: create, read, update, delete, resume
        self.consumers: dict[str, DurableConsumer] = {}  #: durable name -> consumer (once started)
        self.metrics = DeployerMetrics(self)  #: the deployer's and its engines' metrics
        self.metrics_registry.register(FunctionCollector(self.metrics.collect))
        self.server = GrpcServer(
            host=settings.grpc_host,
            port=settings.grpc_port,
            add_servicers=[self._add_api],
            service_names=[SERVICE_NAME],
            interceptors=[AuthInterceptor(self.tokens)],
            credentials=self.tls.grpc_credentials() if self.tls is not None else None,
            max_message_bytes=settings.max_message_bytes,
        )
        self.grpc = self.server

    def _add_api(self, server: Any) -> None:
        assert self.lifecycle is not None and self.deployments is not None
        EndpointApi(
            lifecycle=self.lifecycle,
            deployments=self.deployments,
            stopping=self.stopping,
            outbound=self._outbound,
            model_roots=self.model_roots,
        ).add_to(server)

    async def on_start(self, ctx: ServiceContext) -> None:
        settings = self.settings
        self._outbound = ctx.shared.outbound_policy()
        state = await State.open(ctx.js)
        log_dir = settings.engine_log_dir or ctx.shared.data_dir.expanduser() / "deployer" / "engines"
        reports: list[Deployments] = []

        async def report(event: Any) -> None:
            if reports:
                await reports[0].on_engine_report(event)

        backend: ServingBackend
        if settings.backend == "kubernetes":
            kubeconfig, context = settings.kubernetes.kubeconfig, settings.kubernetes.context

            async def api_client() -> Any:
                return await api_client_from_config(kubeconfig, context)

            backend = KubernetesBackend(
                target=settings.kubernetes_target(),
                hardware_classes=list(settings.kubernetes.hardware_classes),
                api_client=api_client,
                dry_run_dir=settings.kubernetes.dry_run_dir,
            )
        else:
            backend = LocalBackend(
                log_dir=log_dir,
                hardware_classes=settings.local_hardware_classes,
                report=report,
                health_interval_s=settings.health_interval_s,
                max_restarts=settings.max_restarts,
                restart_window_s=settings.restart_window_s,
                ready_timeout_s=settings.ready_timeout_s,
                engine_factory=self.engine_factory,
                cpu_cores_per_engine=settings.local_cpu_cores_per_engine,
            )
        if ctx.store is None:
            self.log.warning("no telemetry store: every canary step holds, then rolls back")
        self.work = work = Workspace(state=state, backend=backend, drain_timeout_s=settings.drain_timeout_s)
        self.deployments = Deployments(
            work,
            ready_timeout_s=settings.ready_timeout_s,
            policy=settings.rollout,
            telemetry=Telemetry(ctx.store) if ctx.store is not None else None,
            winners=StoredWinners(ctx.store) if ctx.store is not None else None,
            warmup_requests=settings.warmup_requests,
            telemetry_lag_s=settings.telemetry_lag_s,
            search_max_age_s=settings.search_max_age_s,
        )
        self.lifecycle = Lifecycle(work, self.deployments)
        reports.append(self.deployments)
        if self.tokens is None:
            self.log.warning(
                "deployer API without authentication: no tokens configured",
                host=settings.grpc_host,
                loopback_only=settings.loopback_only,
            )
        elif self.model_roots is None:
            self.log.warning(
                "tenants without model roots: any tenant may serve any model path "
                "(set EVERTUNE_DEPLOYER_MODEL_ROOTS)"
            )
        await self.lifecycle.resume()
        try:
            await self.server.start()
        except BaseException:
            await work.close()
            raise
        self.consumers = durable_consumers(ctx.js, wiring(), self, source=self.name)
        for durable, consumer in self.consumers.items():
            self.spawn(consumer.run(self.stopping), name=durable)
        await self.serve_metrics(
            ctx, host=settings.metrics_host, port=settings.metrics_port, refresh=self.metrics.refresh
        )
        self.log.info(
            "deployer serving",
            backend=backend.name,
            address=self.server.address,
            tls=tls_mode(self.tls),
            auth="tokens" if self.tokens is not None else "off",
        )

    async def _on_search_completed(self, msg: Msg) -> None:
        assert self.deployments is not None
        await self.deployments.on_search_completed(_event(msg))

    async def _on_breach(self, msg: Msg) -> None:
        assert self.deployments is not None
        await self.deployments.on_breach(_event(msg))

    async def on_stop(self) -> None:
        await self.server.stop(grace_s=self.grace_s)
        if self.work is not None:
            await self.work.close()
        await self.metrics.close()

    @property
    def stats(self) -> DeployerStats:
        """What the deployer counted (empty before start)."""
        return self.work.state.stats if self.work is not None else DeployerStats()

    def engine_replicas(self) -> list[EngineReplica]:
        """The local backend's running engine replicas (none on kubernetes, or before start)."""
        backend = self.work.backend if self.work is not None else None
        if not isinstance(backend, LocalBackend):
            return []
        return [EngineReplica(*replica) for replica in backend.replicas()]

    def details(self) -> dict[str, Any]:
        if self.work is None:
            return {}
        return {
            "deployments_running": len(self.work.backend.running()),
            "events_handled": sum(c.stats.acked for c in self.consumers.values()),
        }
