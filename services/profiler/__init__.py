"""The profiler service. `create` builds it from its settings (`EVERTUNE_PROFILER_*`)."""

from evertune.infra.settings import load_settings
from evertune.profiler.service import ProfilerService
from evertune.profiler.settings import ProfilerSettings


def create() -> ProfilerService:
    """Build the service from the environment; invalid settings raise a one-line SettingsError."""
    return ProfilerService(load_settings(ProfilerSettings))


__all__ = ["ProfilerService", "ProfilerSettings", "create"]
