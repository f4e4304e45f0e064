"""What every deployer workflow shares: KV state, the serving backend, background work and locks
per endpoint, and the writers that keep the route table, the deployment records and the events in
step (the route table owns the weights; `write_routes` mirrors them into the records).

Lifecycle (create, update, delete) and rollouts (promote, canary, rollback) both work through one
`Workspace`. An endpoint's state is in KV; a deployer process holds only what runs in it (tasks,
locks, drains, canary loops), so another process carries on from KV after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, Final

from evertune.deployer import plan
from evertune.deployer.backend import ServingBackend
from evertune.deployer.state import State
from evertune.domain.engines import EngineSpec
from evertune.errors import (
    NotFound,
)
from evertune.infra.events import EventKind
from evertune.infra.logging import bound_ids, get_logger
from evertune.infra.runtime.auth import Principal
from evertune.infra.runtime.tasks import cancel_and_wait
from evertune.v1 import common_pb2, endpoint_pb2, events_pb2

log = get_logger("evertune.deployer")

D = endpoint_pb2
#: Seconds between in-flight checks while a deployment drains.
DRAIN_POLL_S: Final = 0.5


def new_deployment_id() -> str:
    return f"dep-{uuid.uuid4().hex[:12]}"


def new_endpoint_uid() -> str:
    """A fresh immutable endpoint id (96 random bits: never reused in practice)."""
    return f"ep-{uuid.uuid4().hex[:24]}"


class Workspace:
    """The deployer's shared machinery. One instance per deployer process."""

    def __init__(self, *, state: State, backend: ServingBackend, drain_timeout_s: float) -> None:
        self.state = state  #: endpoints, deployments, routes, rollouts in KV; events
        self.backend = backend  #: where engines run
        self.drain_timeout_s = drain_timeout_s  #: longest wait for a draining deployment's requests
        self.draining: dict[str, asyncio.Task[Any]] = {}  #: deployment id -> its drain task
        self._tasks: dict[str, set[asyncio.Task[None]]] = {}  #: endpoint -> its background work
        self._locks: dict[str, asyncio.Lock] = {}  #: endpoint -> its rollout lock
        self._closing = False

    def forget(self, endpoint: str) -> None:
        """Drop a deleted endpoint's lock."""
        self._locks.pop(endpoint, None)

    def spawn(self, endpoint: str, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        if self._closing:
            coro.close()
            return
        task = asyncio.create_task(self._guard(endpoint, coro, name), name=f"deployer:{name}:{endpoint}")
        tasks = self._tasks.setdefault(endpoint, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _guard(self, endpoint: str, coro: Coroutine[Any, Any, None], name: str) -> None:
        with bound_ids(endpoint=endpoint):
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.error("background step failed", step=name, error=str(err) or repr(err), exc_info=True)

    def lock(self, endpoint: str) -> asyncio.Lock:
        return self._locks.setdefault(endpoint, asyncio.Lock())

    async def cancel_work(self, endpoint: str) -> None:
        current = asyncio.current_task()
        await cancel_and_wait([t for t in self._tasks.get(endpoint, set()) if t is not current])

    async def idle(self) -> None:
        """Wait until no background work is left (tests)."""
        while True:
            tasks = [t for ts in self._tasks.values() for t in ts]
            if not tasks:
                return
            await asyncio.wait(tasks)

    async def close(self) -> None:
        """Stop background work (its progress is in KV) and every engine this process runs."""
        self._closing = True
        await cancel_and_wait([t for ts in self._tasks.values() for t in ts])
        await self.backend.close()

    async def visible_endpoint(self, name: str, caller: Principal) -> endpoint_pb2.Endpoint:
        """The endpoint, if the caller may see it; NOT_FOUND otherwise (others' look missing)."""
        endpoint = await self.state.get_endpoint(name)
        if endpoint is None or not caller.sees(endpoint.spec.tenant):
            raise NotFound(f"endpoint {name} not found")
        return endpoint

    def new_deployment(
        self,
        endpoint: str,
        deployment_id: str,
        engine: EngineSpec,
        *,
        origin: int,
        now: datetime,
        previous: str = "",
        trial_id: str = "",
        search_id: str = "",
        message: str = "",
    ) -> endpoint_pb2.Deployment:
        deployment = endpoint_pb2.Deployment(
            id=deployment_id,
            endpoint=endpoint,
            engine_config=engine.to_proto(),
            state=D.DEPLOYMENT_STATE_PENDING,
            origin=origin,  # type: ignore[arg-type]
            previous_deployment_id=previous,
            origin_trial_id=trial_id,
            origin_search_id=search_id,
            state_message=message,
        )
        deployment.create_time.FromDatetime(now)
        deployment.update_time.FromDatetime(now)
        return deployment

    async def emit_started(
        self,
        deployment: endpoint_pb2.Deployment,
        *,
        trigger: int,
        cause_id: str,
        steps: list[int] | None = None,
    ) -> None:
        """deploy.started, caused by `cause_id` (an event id, or the request id of an API call)."""
        await self.state.emit(
            EventKind.DEPLOY_STARTED,
            deployment.endpoint,
            events_pb2.DeployStarted(
                deployment_id=deployment.id,
                previous_deployment_id=deployment.previous_deployment_id,
                engine_config=deployment.engine_config,
                trigger=trigger,  # type: ignore[arg-type]
                search_id=deployment.origin_search_id,
                trial_id=deployment.origin_trial_id,
                canary_steps=steps or [],
            ),
            cause_id=cause_id,
        )

    async def emit_rolled_back(
        self, name: str, taken_out: str, restored: str, reason: str, *, cause_id: str
    ) -> None:
        """deploy.rolled_back of a Rollback call (trigger API), caused by its request id."""
        await self.state.emit(
            EventKind.DEPLOY_ROLLED_BACK,
            name,
            events_pb2.DeployRolledBack(
                deployment_id=taken_out,
                restored_deployment_id=restored,
                trigger=events_pb2.DEPLOY_TRIGGER_API,
                reason=reason,
            ),
            cause_id=cause_id,
        )

    async def record_promoted(
        self, name: str, deployment: endpoint_pb2.Deployment, previous: str, *, cause_id: str
    ) -> None:
        """Record that `deployment` took all traffic: ACTIVE, the endpoint's stable, the mutex
        released, deploy.promoted (caused by `cause_id`, what began the rollout)."""
        await self.set_deployment(name, deployment.id, state=D.DEPLOYMENT_STATE_ACTIVE)
        if previous:
            await self.set_deployment(name, previous, state=D.DEPLOYMENT_STATE_DRAINING)
        await self.set_endpoint_state(name, D.ENDPOINT_STATE_READY, "", stable=deployment.id)
        await self.state.end_rollout(name, deployment.id)
        promoted = events_pb2.DeployPromoted(
            deployment_id=deployment.id,
            previous_deployment_id=previous,
            engine_config=deployment.engine_config,
        )
        started = deployment.create_time.ToDatetime()
        promoted.rollout_duration.FromTimedelta(self.state.clock().replace(tzinfo=None) - started)
        await self.state.emit(EventKind.DEPLOY_PROMOTED, name, promoted, cause_id=cause_id)
        log.info("deployment promoted", endpoint=name, deployment=deployment.id)

    async def switch_traffic(self, name: str, *, new: str, old: str, urls: list[str]) -> None:
        """All weight to `new` at once; `old` stays listed at weight 0 while it drains."""
        await self.write_routes(name, plan.AllTo(new), new_urls={new: urls})
        if old:
            await self.set_deployment(name, old, state=D.DEPLOYMENT_STATE_DRAINING)

    async def set_deployment(
        self,
        name: str,
        deployment_id: str,
        *,
        state: int | None = None,
        upstream_url: str | None = None,
        message: str | None = None,
    ) -> endpoint_pb2.Deployment:
        """Change a deployment's record. Its weight is not set here: `_write_routes` mirrors the
        route table into it, and a deployment set to a stopped state weighs 0."""

        def change(deployment: endpoint_pb2.Deployment) -> endpoint_pb2.Deployment:
            if state is not None:
                deployment.state = state  # type: ignore[assignment]
                if state in plan.STOPPED_STATES:
                    deployment.weight = 0
            if upstream_url is not None:
                deployment.upstream_url = upstream_url
            if message is not None:
                deployment.state_message = message[:500]
            return deployment

        return await self.state.change_deployment(name, deployment_id, change)

    async def write_routes(
        self,
        name: str,
        weights: plan.WeightChange,
        *,
        new_urls: dict[str, list[str]] | None = None,
    ) -> endpoint_pb2.RouteTable:
        """Rewrite the route table by `weights` (deployment -> weight now, to next), apply it, and
        mirror each deployment's new weight into its record: the table is the one owner of the
        weights; the records (what ListDeployments shows) follow it."""
        endpoint = await self.state.get_endpoint(name)
        tenant = endpoint.spec.tenant if endpoint is not None else ""
        uid = endpoint.uid if endpoint is not None else ""
        model = endpoint.spec.model if endpoint is not None else ""
        before: dict[str, int] = {}
        after: dict[str, int] = {}

        def change(table: endpoint_pb2.RouteTable) -> endpoint_pb2.RouteTable:
            before.clear()
            before.update(plan.weights_of(table))
            after.clear()
            after.update(weights(before))
            urls = {**plan.urls_of(table), **(new_urls or {})}
            return plan.route_table(
                name,
                after,
                urls,
                revision=table.revision,
                now=self.state.clock(),
                tenant=tenant or table.tenant,
                endpoint_uid=uid or table.endpoint_uid,
                model=model or table.model,
            )

        table = await self.state.change_routes(name, change)
        await self.backend.apply_routes(table)
        for deployment_id in sorted(before.keys() | after.keys()):
            await self._mirror_weight(name, deployment_id, after.get(deployment_id, 0))
        return table

    async def _mirror_weight(self, name: str, deployment_id: str, weight: int) -> None:
        """Set a deployment record's weight to its route table's (gone with the endpoint: nothing)."""

        def change(deployment: endpoint_pb2.Deployment) -> endpoint_pb2.Deployment:
            deployment.weight = weight
            return deployment

        with contextlib.suppress(NotFound):
            await self.state.change_deployment(name, deployment_id, change)

    async def set_endpoint_state(
        self, name: str, state: int, message: str, *, stable: str | None = None
    ) -> None:
        """Change an endpoint's state (and stable deployment); emits endpoint.updated on a change."""

        def change(endpoint: endpoint_pb2.Endpoint) -> endpoint_pb2.Endpoint | None:
            if endpoint.state == D.ENDPOINT_STATE_DELETING and state != D.ENDPOINT_STATE_DELETING:
                return None
            endpoint.state = state  # type: ignore[assignment]
            endpoint.state_message = message
            if stable is not None:
                endpoint.stable_deployment_id = stable
            return endpoint

        try:
            before, after = await self.state.change_endpoint(name, change)
        except NotFound:
            return
        if after.revision != before.revision:
            await self.state.emit(
                EventKind.ENDPOINT_UPDATED,
                name,
                events_pb2.EndpointUpdated(endpoint=after, previous_revision=before.revision),
                severity=common_pb2.SEVERITY_WARNING
                if state in (D.ENDPOINT_STATE_DEGRADED, D.ENDPOINT_STATE_FAILED)
                else None,
            )

    async def drain(self, name: str, deployment_id: str, *, final: int) -> None:
        """Weight 0, wait until nothing is in flight (or the drain timeout), stop, set `final`."""
        deployment = await self.state.get_deployment(name, deployment_id)
        if deployment is None or deployment.state in plan.STOPPED_STATES:
            return
        task = asyncio.current_task()
        if task is not None:
            self.draining[deployment_id] = task
            task.add_done_callback(lambda _: self.draining.pop(deployment_id, None))
        await self.set_deployment(name, deployment_id, state=D.DEPLOYMENT_STATE_DRAINING)
        await self.write_routes(name, plan.Silence(deployment_id))
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            in_flight = await self.backend.in_flight(deployment_id)
            if plan.drained(in_flight, waited_s=loop.time() - started, timeout_s=self.drain_timeout_s):
                break
            await asyncio.sleep(DRAIN_POLL_S)
        await self.backend.stop(deployment_id)
        await self.write_routes(name, plan.Without(deployment_id))
        await self.set_deployment(name, deployment_id, state=final, upstream_url="")
        log.info("deployment drained and stopped", endpoint=name, deployment=deployment_id)
