"""The searcher service. Serves gRPC (standard health and reflection today; `SearchService` with the work
that implements it, see docs/services/searcher.md) and runs the shared lifecycle.
"""

from __future__ import annotations

from typing import ClassVar

from evertune.searcher.settings import SearcherSettings

from evertune.runtime import GrpcServer, Service, ServiceContext


class SearcherService(Service):
    name: ClassVar[str] = "searcher"
    description: ClassVar[str] = "Candidate space, model-ranked trials, gates, winner"

    def __init__(self, settings: SearcherSettings) -> None:
        super().__init__()
        self.settings = settings
        self._grpc = GrpcServer(host=settings.grpc_host, port=settings.grpc_port)

    async def on_start(self, ctx: ServiceContext) -> None:
        await self._grpc.start()

    async def on_stop(self) -> None:
        await self._grpc.stop(grace_s=5.0)

    def listen(self) -> dict[str, str]:
        return {"grpc": self._grpc.address} if self._grpc.port else {}
