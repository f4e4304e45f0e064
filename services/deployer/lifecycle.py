"""Endpoints through their lifecycle: reads, create, update, delete, and what a restarted deployer
picks up (`resume`). The first deployment's rollout and everything after it are `deployments.py`'s.

Each call changes KV with compare-and-set and emits its events; the slow part (starting engines,
draining, deleting) is background work that records its progress in KV.
"""

from __future__ import annotations

import asyncio
import contextlib

from evertune.deployer import plan
from evertune.deployer.backend import Target
from evertune.deployer.commands import CreateCommand, Page, UpdateCommand
from evertune.deployer.deployments import Deployments
from evertune.deployer.endpoint_spec import EndpointDef
from evertune.deployer.state import RequestRecord, RolloutRecord, request_key
from evertune.deployer.validation import (
    endpoint_spec_proto,
    page_token,
    update_command,
)
from evertune.deployer.workspace import Workspace, new_deployment_id, new_endpoint_uid
from evertune.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
)
from evertune.infra.events import EventKind
from evertune.infra.logging import get_logger
from evertune.infra.runtime.auth import Principal
from evertune.v1 import endpoint_pb2, events_pb2

log = get_logger("evertune.deployer")

D = endpoint_pb2


class Lifecycle:
    """Create, read, update and delete endpoints; resume after a restart."""

    def __init__(self, work: Workspace, deployments: Deployments) -> None:
        self.work = work  #: the shared machinery
        self.state = work.state
        self.backend = work.backend
        self.deployments = deployments  #: starts the first deployment, and resumes rollouts

    async def list_endpoints(
        self, caller: Principal, *, tenant: str, page: Page
    ) -> tuple[list[endpoint_pb2.Endpoint], str]:
        """A page of the endpoints the caller sees (of `tenant` when given), by name."""
        out: list[endpoint_pb2.Endpoint] = []
        for endpoint in await self.state.list_endpoints():
            name = endpoint.spec.name
            if name <= page.after or not caller.sees(endpoint.spec.tenant):
                continue
            if tenant and endpoint.spec.tenant != tenant:
                continue
            if len(out) == page.size:
                return out, page_token(out[-1].spec.name)
            out.append(endpoint)
        return out, ""

    async def list_deployments(
        self, name: str, caller: Principal, *, include_stopped: bool, page: Page
    ) -> tuple[list[endpoint_pb2.Deployment], str]:
        """A page of an endpoint's deployments, newest first."""
        await self.work.visible_endpoint(name, caller)
        deployments = [
            d
            for d in await self.state.list_deployments(name)
            if include_stopped or d.state not in plan.STOPPED_STATES
        ]
        start = 0
        if page.after:
            ids = [d.id for d in deployments]
            start = ids.index(page.after) + 1 if page.after in ids else len(ids)
        chunk = deployments[start : start + page.size]
        more = start + page.size < len(deployments)
        return chunk, page_token(chunk[-1].id) if more and chunk else ""

    async def create_endpoint(
        self, command: CreateCommand, caller: Principal
    ) -> tuple[endpoint_pb2.Endpoint, endpoint_pb2.Deployment]:
        spec = command.spec
        if not caller.sees(spec.tenant):
            raise PermissionDenied(
                f"spec.tenant: this token may only create endpoints of tenant {caller.tenant}"
            )
        key = request_key(tenant=spec.tenant, rpc="create", request_id=command.request_id)
        record = RequestRecord(
            rpc="create",
            fingerprint=command.fingerprint,
            endpoint=spec.name,
            deployment_id=new_deployment_id(),
            endpoint_uid=new_endpoint_uid(),
        )
        target = Target(
            deployment_id=record.deployment_id,
            endpoint=spec.name,
            engine=spec.initial_engine,
            hardware_class=spec.hardware_pool.hardware_class,
            tenant=spec.tenant,
        )
        self.backend.check(target)
        earlier = await self.state.claim_request(key, record)
        if earlier is not None:
            if earlier.fingerprint != command.fingerprint or earlier.rpc != "create":
                raise InvalidArgument(
                    "request_id: already used with a different spec; choose a new request_id"
                )
            record = earlier
            endpoint = await self.state.get_endpoint(spec.name)
            deployment = await self.state.get_deployment(spec.name, record.deployment_id)
            if endpoint is not None and deployment is not None:
                return endpoint, deployment
        now = self.state.clock()
        endpoint = endpoint_pb2.Endpoint(
            spec=endpoint_spec_proto(spec),
            state=D.ENDPOINT_STATE_PROVISIONING,
            revision=1,
            uid=record.endpoint_uid or new_endpoint_uid(),
        )
        endpoint.create_time.FromDatetime(now)
        endpoint.update_time.FromDatetime(now)
        deployment = self.work.new_deployment(
            spec.name, record.deployment_id, spec.initial_engine, origin=D.DEPLOYMENT_ORIGIN_INITIAL, now=now
        )
        try:
            await self.state.create_endpoint(endpoint)
        except AlreadyExists:
            if earlier is None or not await self._is_our_half_create(spec, record):
                raise
            stored = await self.state.get_endpoint(spec.name)
            if stored is not None:
                endpoint = stored
        with contextlib.suppress(AlreadyExists):
            await self.state.create_deployment(deployment)
        # the first deployment's rollout and its events are the CreateEndpoint call's
        rollout = RolloutRecord(deployment_id=deployment.id, cause_id=command.request_id)
        await self.state.begin_rollout(spec.name, deployment.id, rollout)
        await self.state.emit(
            EventKind.ENDPOINT_CREATED,
            spec.name,
            events_pb2.EndpointCreated(endpoint=endpoint),
            endpoint_uid=endpoint.uid,
            cause_id=command.request_id,
        )
        await self.work.emit_started(
            deployment, trigger=events_pb2.DEPLOY_TRIGGER_INITIAL, cause_id=command.request_id
        )
        self.work.spawn(spec.name, self.deployments.roll_out(spec.name, deployment.id), name="provision")
        return endpoint, deployment

    async def _is_our_half_create(self, spec: EndpointDef, record: RequestRecord) -> bool:
        """An earlier try of the same request stored the endpoint but not all the rest."""
        stored = await self.state.get_endpoint(spec.name)
        if stored is None or stored.spec != endpoint_spec_proto(spec):
            return False
        if record.endpoint_uid and stored.uid != record.endpoint_uid:
            return False  # the name was deleted and created again since
        initial = [
            d for d in await self.state.list_deployments(spec.name) if d.origin == D.DEPLOYMENT_ORIGIN_INITIAL
        ]
        return all(d.id == record.deployment_id for d in initial)

    async def update_endpoint(self, command: UpdateCommand, caller: Principal) -> endpoint_pb2.Endpoint:
        """Apply the masked fields to the endpoint as stored, with compare-and-set: each attempt
        re-applies them to the spec it read, so a concurrent change of other fields is kept."""
        await self.work.visible_endpoint(command.name, caller)

        def change(endpoint: endpoint_pb2.Endpoint) -> endpoint_pb2.Endpoint:
            if endpoint.state == D.ENDPOINT_STATE_DELETING:
                raise FailedPrecondition(f"endpoint {command.name} is being deleted")
            merged = update_command(command.request, current=endpoint.spec)
            endpoint.spec.CopyFrom(endpoint_spec_proto(merged.spec))
            return endpoint

        before, after = await self.state.change_endpoint(
            command.name, change, expected_revision=command.expected_revision
        )
        if after.revision != before.revision:
            await self.state.emit(
                EventKind.ENDPOINT_UPDATED,
                command.name,
                events_pb2.EndpointUpdated(
                    endpoint=after,
                    changed_fields=list(command.changed_fields),
                    previous_revision=before.revision,
                ),
            )
        return after

    async def delete_endpoint(
        self, name: str, caller: Principal, *, expected_revision: int
    ) -> endpoint_pb2.Endpoint:
        await self.work.visible_endpoint(name, caller)

        def change(endpoint: endpoint_pb2.Endpoint) -> endpoint_pb2.Endpoint | None:
            if endpoint.state == D.ENDPOINT_STATE_DELETING:
                return None
            endpoint.state = D.ENDPOINT_STATE_DELETING
            endpoint.state_message = "draining and stopping deployments"
            return endpoint

        before, after = await self.state.change_endpoint(name, change, expected_revision=expected_revision)
        if after.revision != before.revision:
            await self.state.emit(
                EventKind.ENDPOINT_UPDATED,
                name,
                events_pb2.EndpointUpdated(endpoint=after, previous_revision=before.revision),
            )
        self.work.spawn(name, self._delete(name), name="delete")
        return after

    async def _delete(self, name: str) -> None:
        """Weights to 0, wait for in-flight requests (drain timeout), stop everything, forget it."""
        await self.work.cancel_work(name)
        async with self.work.lock(name):
            deployments = await self.state.list_deployments(name)
            await self.work.write_routes(name, plan.SilenceAll())
            live = [d for d in deployments if d.state in plan.LIVE_STATES]
            await asyncio.gather(
                *(self.work.drain(name, d.id, final=D.DEPLOYMENT_STATE_RETIRED) for d in live)
            )
            for deployment in live:
                await self.backend.stop(deployment.id)
            await self.state.delete_routes(name)
            await self.backend.apply_routes(endpoint_pb2.RouteTable(endpoint=name))
            for deployment in deployments:
                await self.state.delete_deployment(name, deployment.id)
            holder = await self.state.rollout_holder(name)
            if holder:
                await self.state.end_rollout(name, holder)
            endpoint = await self.state.get_endpoint(name)
            await self.state.delete_endpoint(name)
            if endpoint is not None:
                await self.state.emit(
                    EventKind.ENDPOINT_DELETED,
                    name,
                    events_pb2.EndpointDeleted(
                        name=name, tenant=endpoint.spec.tenant, revision=endpoint.revision
                    ),
                    endpoint_uid=endpoint.uid,
                )
            log.info("endpoint deleted", endpoint=name)
        self.work.forget(name)

    async def resume(self) -> None:
        """Pick up what a previous deployer process left: deletions, rollouts, running deployments."""
        for endpoint in await self.state.list_endpoints():
            name = endpoint.spec.name
            if endpoint.state == D.ENDPOINT_STATE_DELETING:
                self.work.spawn(name, self._delete(name), name="delete")
                continue
            for deployment in await self.state.list_deployments(name):
                action = plan.resume_action(deployment, endpoint_state=endpoint.state)
                if action == "restart":
                    self.work.spawn(name, self.deployments.restart(endpoint, deployment), name="restart")
                elif action == "finish_start":
                    await self.state.begin_rollout(name, deployment.id)
                    self.work.spawn(
                        name, self.deployments.roll_out(name, deployment.id), name="resume-rollout"
                    )
                elif action == "continue_canary":
                    self.work.spawn(
                        name, self.deployments.continue_canary(endpoint, deployment), name="resume-canary"
                    )
                elif action == "finish_drain":
                    self.work.spawn(
                        name,
                        self.work.drain(name, deployment.id, final=D.DEPLOYMENT_STATE_RETIRED),
                        name="drain",
                    )
