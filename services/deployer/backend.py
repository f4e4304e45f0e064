"""The serving-backend seam: what the deployer asks of whatever runs its engines.

`LocalBackend` (backend_local.py) runs engines as processes on this machine. A Kubernetes backend
implements the same protocol: `start` applies a Deployment and a Service and returns the Service's
URL, `wait_ready` waits for the rollout, `apply_routes` writes the HTTPRoute weights (the gateway's
route table in KV is written by the deployer either way), `stop` deletes them; it reports pod
restarts through the same `EngineReport` callback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from evertune.domain.engines import EngineSpec
from evertune.v1 import endpoint_pb2


@dataclass(frozen=True)
class Target:
    """What one deployment runs."""

    deployment_id: str  #: deployment id ("dep-" + 12 hex)
    endpoint: str  #: endpoint name; also the model name the engine serves (the gateway sends it)
    engine: EngineSpec  #: engine kind, model and knobs
    hardware_class: str  #: the endpoint's hardware pool class
    tenant: str = ""  #: the endpoint's tenant (labels its Kubernetes objects; "" = operators')


@dataclass(frozen=True)
class EngineReport:
    """Something a backend noticed about a running deployment on its own."""

    deployment_id: str  #: the deployment concerned
    endpoint: str  #: its endpoint
    what: Literal["exited", "restarted", "gave_up"]  #: an engine died / is serving again / won't be restarted
    replica: int  #: replica index, from 0
    restarts: int  #: restarts of this replica within the restart window, this one included
    detail: str  #: one line for a person (exit code, log file)


#: Where a backend sends its reports (the deployer records them and emits events).
ReportSink = Callable[[EngineReport], Awaitable[None]]


class ServingBackend(Protocol):
    """Runs deployments. Every method is idempotent per deployment id."""

    #: Backend name for logs and docs ("local", "kubernetes").
    name: str
    #: Whether the deployer can reach the deployments' URLs (warm-up requests); False in a dry run.
    reachable: bool

    def check(self, target: Target) -> None:
        """Raise InvalidArgument (a knob refused) or FailedPrecondition (a hardware class this
        backend does not serve) without starting anything."""

    async def start(self, target: Target) -> list[str]:
        """Start the deployment's engines; return their base URLs (one per replica). Returns once
        processes are started, not when they are ready."""

    async def wait_ready(self, deployment_id: str, timeout_s: float) -> None:
        """Return when every replica serves; raise EngineStartFailed (UNAVAILABLE) otherwise,
        with the deployment's engines stopped."""

    async def in_flight(self, deployment_id: str) -> int | None:
        """Requests running or queued in the deployment's engines now; None when unknown."""

    async def apply_routes(self, table: endpoint_pb2.RouteTable) -> None:
        """Apply an endpoint's traffic split where the backend has its own router (none locally)."""

    async def stop(self, deployment_id: str) -> None:
        """Stop the deployment's engines; returns when nothing of it runs."""

    def running(self) -> set[str]:
        """Ids of the deployments this backend runs now."""

    async def close(self) -> None:
        """Stop everything (the deployer is stopping)."""
