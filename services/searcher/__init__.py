"""The searcher service. `create` builds it from its settings (`EVERTUNE_SEARCHER_*`)."""

from evertune.infra.settings import load_settings
from evertune.searcher.service import SearcherService
from evertune.searcher.settings import SearcherSettings


def create() -> SearcherService:
    """Build the service from the environment; invalid settings raise a one-line SettingsError."""
    return SearcherService(load_settings(SearcherSettings))


__all__ = ["SearcherService", "SearcherSettings", "create"]
