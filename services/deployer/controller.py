"""The deployer's front: one `Deployer` whose calls the API and the consumers make, handed to
`lifecycle.Lifecycle` (endpoints: create, read, update, delete, resume) and `rollouts.Rollouts`
(deployments: promote, canary, rollback, search winners, breaches, engine reports), which share a
`workspace.Workspace` (KV state, the backend, background work, the writers).
"""

from __future__ import annotations

from evertune.deployer.backend import EngineReport, ServingBackend
from evertune.deployer.lifecycle import Lifecycle
from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.deployer.rollouts import Rollouts
from evertune.deployer.state import State
from evertune.deployer.telemetry import Telemetry
from evertune.deployer.validation import CreateCommand, Page, PromoteCommand, RollbackCommand, UpdateCommand
from evertune.deployer.winner_check import StoredWinners
from evertune.deployer.workspace import Workspace

from evertune.infra.runtime.auth import Principal
from evertune.v1 import endpoint_pb2, events_pb2


class Deployer:
    """Endpoints and deployments. One instance per deployer process."""

    def __init__(
        self,
        *,
        state: State,
        backend: ServingBackend,
        ready_timeout_s: float,
        drain_timeout_s: float,
        policy: RolloutPolicy | None = None,
        telemetry: Telemetry | None = None,
        winners: StoredWinners | None = None,
        warmup_requests: int = 3,
        telemetry_lag_s: float = 2.0,
        search_max_age_s: float = 3600.0,
    ) -> None:
        self.work = Workspace(state=state, backend=backend, drain_timeout_s=drain_timeout_s)
        self.rollouts = Rollouts(
            self.work,
            ready_timeout_s=ready_timeout_s,
            policy=policy,
            telemetry=telemetry,
            winners=winners,
            warmup_requests=warmup_requests,
            telemetry_lag_s=telemetry_lag_s,
            search_max_age_s=search_max_age_s,
        )
        self.lifecycle = Lifecycle(self.work, self.rollouts)
        self.state = state
        self.backend = backend

    # -- endpoints ----------------------------------------------------------------------------

    async def visible_endpoint(self, name: str, caller: Principal) -> endpoint_pb2.Endpoint:
        return await self.work.visible_endpoint(name, caller)

    async def list_endpoints(
        self, caller: Principal, *, tenant: str, page: Page
    ) -> tuple[list[endpoint_pb2.Endpoint], str]:
        return await self.lifecycle.list_endpoints(caller, tenant=tenant, page=page)

    async def list_deployments(
        self, name: str, caller: Principal, *, include_stopped: bool, page: Page
    ) -> tuple[list[endpoint_pb2.Deployment], str]:
        return await self.lifecycle.list_deployments(name, caller, include_stopped=include_stopped, page=page)

    async def create_endpoint(
        self, command: CreateCommand, caller: Principal
    ) -> tuple[endpoint_pb2.Endpoint, endpoint_pb2.Deployment]:
        return await self.lifecycle.create_endpoint(command, caller)

    async def update_endpoint(self, command: UpdateCommand, caller: Principal) -> endpoint_pb2.Endpoint:
        return await self.lifecycle.update_endpoint(command, caller)

    async def delete_endpoint(
        self, name: str, caller: Principal, *, expected_revision: int
    ) -> endpoint_pb2.Endpoint:
        return await self.lifecycle.delete_endpoint(name, caller, expected_revision=expected_revision)

    async def resume(self) -> None:
        await self.lifecycle.resume()

    # -- deployments ----------------------------------------------------------------------------

    async def promote(self, command: PromoteCommand, caller: Principal) -> endpoint_pb2.Deployment:
        return await self.rollouts.promote(command, caller)

    async def rollback(self, command: RollbackCommand, caller: Principal) -> endpoint_pb2.Deployment:
        return await self.rollouts.rollback(command, caller)

    async def on_search_completed(self, event: events_pb2.Event) -> None:
        await self.rollouts.on_search_completed(event)

    async def on_breach(self, event: events_pb2.Event) -> None:
        await self.rollouts.on_breach(event)

    async def on_engine_report(self, report: EngineReport) -> None:
        await self.rollouts.on_engine_report(report)

    # -- background work ----------------------------------------------------------------------

    async def idle(self) -> None:
        """Wait until no background work is left (tests)."""
        await self.work.idle()

    async def close(self) -> None:
        """Stop background work (its progress is in KV) and every engine this process runs."""
        await self.work.close()
