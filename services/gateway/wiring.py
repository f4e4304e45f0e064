"""The gateway's place in the loop: it follows the deployer's route tables and publishes the
telemetry of every request it proxies."""

from evertune.gateway.settings import GatewaySettings
from evertune.infra.bus.wiring import Consumes, Delivery, Wiring


def wiring(settings: GatewaySettings) -> Wiring:
    """What the gateway subscribes to and publishes (no store)."""
    return Wiring(
        service="gateway",
        consumes=(Consumes(Delivery.KV_WATCH, source=settings.routes_bucket, subject="", handler="_apply"),),
        subjects=("evertune.telemetry.<endpoint>",),
    )
