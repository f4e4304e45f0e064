"""The searcher service. Serves gRPC (standard health and reflection today; `SearchService` with the work
that implements it, see docs/services/searcher.md) and runs the shared lifecycle.
"""

from __future__ import annotations

from typing import ClassVar

from evertune.searcher.settings import SearcherSettings

from evertune.runtime import GrpcService


class SearcherService(GrpcService):
    name: ClassVar[str] = "searcher"
    description: ClassVar[str] = "Candidate space, model-ranked trials, gates, winner"

    def __init__(self, settings: SearcherSettings) -> None:
        super().__init__(host=settings.grpc_host, port=settings.grpc_port)
        self.settings = settings
