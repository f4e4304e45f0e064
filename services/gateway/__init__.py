"""The gateway service. `create` builds it from its settings (`EVERTUNE_GATEWAY_*`)."""

from evertune.gateway.service import GatewayService
from evertune.gateway.settings import GatewaySettings
from evertune.infra.settings import load_settings


def create() -> GatewayService:
    """Build the service from the environment; invalid settings raise a one-line SettingsError."""
    return GatewayService(load_settings(GatewaySettings))


__all__ = ["GatewayService", "GatewaySettings", "create"]
