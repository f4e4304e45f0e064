"""The deployer service. Serves gRPC (standard health and reflection today; `EndpointService` with the work
that implements it, see docs/services/deployer.md) and runs the shared lifecycle.
"""

from __future__ import annotations

from typing import ClassVar

from evertune.deployer.settings import DeployerSettings

from evertune.runtime import GrpcServer, Service, ServiceContext


class DeployerService(Service):
    name: ClassVar[str] = "deployer"
    description: ClassVar[str] = "Endpoints and deployments, progressive rollout, rollback"

    def __init__(self, settings: DeployerSettings) -> None:
        super().__init__()
        self.settings = settings
        self._grpc = GrpcServer(host=settings.grpc_host, port=settings.grpc_port)

    async def on_start(self, ctx: ServiceContext) -> None:
        await self._grpc.start()

    async def on_stop(self) -> None:
        await self._grpc.stop(grace_s=5.0)

    def listen(self) -> dict[str, str]:
        return {"grpc": self._grpc.address} if self._grpc.port else {}
