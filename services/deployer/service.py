"""The deployer service. Serves gRPC (standard health and reflection today; `EndpointService` with the work
that implements it, see docs/services/deployer.md) and runs the shared lifecycle.
"""

from __future__ import annotations

from typing import ClassVar

from evertune.deployer.settings import DeployerSettings

from evertune.runtime import GrpcService


class DeployerService(GrpcService):
    name: ClassVar[str] = "deployer"
    description: ClassVar[str] = "Endpoints and deployments, progressive rollout, rollback"

    def __init__(self, settings: DeployerSettings) -> None:
        super().__init__(host=settings.grpc_host, port=settings.grpc_port)
        self.settings = settings
