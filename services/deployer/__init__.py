"""The deployer service. `create` builds it from its settings (`EVERTUNE_DEPLOYER_*`)."""

from evertune.deployer.service import DeployerService
from evertune.deployer.settings import DeployerSettings
from evertune.infra.settings import load_settings


def create() -> DeployerService:
    """Build the service from the environment; invalid settings raise a one-line SettingsError."""
    return DeployerService(load_settings(DeployerSettings))


__all__ = ["DeployerService", "DeployerSettings", "create"]
