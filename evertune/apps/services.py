"""The services evertune runs, by name, in start order; `create_service` builds one from settings."""

from __future__ import annotations

import importlib

from evertune.errors import InvalidArgument
from evertune.infra.runtime import Service

#: Service names in the order `evertune up` starts them (stopped in reverse): the store owner and
#: the monitors first, the gateway (which takes client traffic) last.
SERVICE_NAMES: tuple[str, ...] = ("profiler", "sla-monitor", "runner", "searcher", "deployer", "gateway")


def create_service(name: str) -> Service:
    """Build service `name` (as `evertune.<name>`, dash to underscore) from its settings."""
    if name not in SERVICE_NAMES:
        raise InvalidArgument(f"unknown service {name!r}; one of: {', '.join(SERVICE_NAMES)}")
    module = importlib.import_module(f"evertune.{name.replace('-', '_')}")
    service: Service = module.create()
    return service
