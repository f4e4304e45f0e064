"""The runner service. `create` builds it from its settings (`EVERTUNE_RUNNER_*`)."""

from evertune.infra.settings import load_settings
from evertune.runner.service import RunnerService
from evertune.runner.settings import RunnerSettings


def create() -> RunnerService:
    """Build the service from the environment; invalid settings raise a one-line SettingsError."""
    return RunnerService(load_settings(RunnerSettings))


__all__ = ["RunnerService", "RunnerSettings", "create"]
