"""The gateway service: the OpenAI-compatible streaming proxy in front of an endpoint's deployments.

Today it runs the shared lifecycle and answers the micro-service API; the proxy, client-observed
timing and telemetry publishing arrive with the record/watch work (see docs/services/gateway.md).
"""

from __future__ import annotations

from typing import ClassVar

from evertune.gateway.settings import GatewaySettings

from evertune.runtime import Service


class GatewayService(Service):
    name: ClassVar[str] = "gateway"
    description: ClassVar[str] = "OpenAI-compatible streaming proxy; client-observed timing; route weights"

    def __init__(self, settings: GatewaySettings) -> None:
        super().__init__()
        self.settings = settings
