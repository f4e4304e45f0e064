"""The EndpointService servicer: validate (validation.py), scope to the caller (auth.py), act
(endpoints: lifecycle.py; deployments: deployments.py), answer. Errors become gRPC statuses in one
place (`evertune.infra.runtime.run_unary`).

Deadlines: each unary call runs within the client's deadline; when it runs out the call answers
DEADLINE_EXCEEDED (background work it started — engine starts, drains — carries on and is visible
through GetEndpoint / ListDeployments / WatchEvents).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC

import grpc

from evertune.deployer import validation
from evertune.deployer.commands import WatchFilter
from evertune.deployer.deployments import Deployments
from evertune.deployer.lifecycle import Lifecycle
from evertune.deployer.model_roots import ModelRoots
from evertune.deployer.watch import Incarnation, TenantScope, watch
from evertune.deployer.workspace import Workspace
from evertune.infra.logging import bound_ids, get_logger
from evertune.infra.outbound import OutboundPolicy
from evertune.infra.runtime import run_unary
from evertune.infra.runtime.auth import caller
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import endpoint_service_pb2_grpc as pb_grpc
from evertune.v1 import events_pb2

log = get_logger("evertune.deployer.api")

#: Full name of the service (health and reflection list it).
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["EndpointService"].full_name


class EndpointApi(pb_grpc.EndpointServiceServicer):
    """gRPC face of the deployer: endpoints (`Lifecycle`) and deployments (`Deployments`)."""

    def __init__(
        self,
        *,
        lifecycle: Lifecycle,
        deployments: Deployments,
        stopping: asyncio.Event,
        outbound: OutboundPolicy,
        model_roots: ModelRoots | None = None,
    ) -> None:
        """`outbound`: where alert routes' URLs may point (a route to an internal address is refused).
        `model_roots`: the folders each tenant's models must lie in (None: any model)."""
        self.lifecycle = lifecycle
        self.deployments = deployments
        self.work: Workspace = lifecycle.work  #: KV state and the caller's view of endpoints
        self.stopping = stopping
        self.outbound = outbound
        self.model_roots = model_roots

    def add_to(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_EndpointServiceServicer_to_server(self, server)  # type: ignore[no-untyped-call]

    async def CreateEndpoint(
        self, request: pb.CreateEndpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateEndpointResponse:
        async def work() -> pb.CreateEndpointResponse:
            who = caller()
            tenant = "" if who.all_tenants else who.tenant
            command = validation.create_command(request, caller_tenant=tenant or "default")
            validation.check_alert_targets(command.spec, self.outbound)
            validation.check_models(command.spec, self.model_roots)
            with bound_ids(endpoint=command.spec.name, request=command.request_id):
                endpoint, deployment = await self.lifecycle.create_endpoint(command, who)
            return pb.CreateEndpointResponse(endpoint=endpoint, deployment=deployment)

        return await run_unary(context, "CreateEndpoint", work)

    async def GetEndpoint(
        self, request: pb.GetEndpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetEndpointResponse:
        async def work() -> pb.GetEndpointResponse:
            name = validation.endpoint_name(request.name, "name")
            return pb.GetEndpointResponse(endpoint=await self.work.visible_endpoint(name, caller()))

        return await run_unary(context, "GetEndpoint", work)

    async def ListEndpoints(
        self, request: pb.ListEndpointsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListEndpointsResponse:
        async def work() -> pb.ListEndpointsResponse:
            if request.tenant:
                validation.tenant_name(request.tenant, "tenant")
            page = validation.page(request.page_size, request.page_token)
            endpoints, token = await self.lifecycle.list_endpoints(caller(), tenant=request.tenant, page=page)
            return pb.ListEndpointsResponse(endpoints=endpoints, next_page_token=token)

        return await run_unary(context, "ListEndpoints", work)

    async def UpdateEndpoint(
        self, request: pb.UpdateEndpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateEndpointResponse:
        async def work() -> pb.UpdateEndpointResponse:
            who = caller()
            name = validation.endpoint_name(request.name, "name")
            current = await self.work.visible_endpoint(name, who)
            command = validation.update_command(request, current=current.spec)
            validation.check_alert_targets(command.spec, self.outbound)
            validation.check_models(command.spec, self.model_roots)
            return pb.UpdateEndpointResponse(endpoint=await self.lifecycle.update_endpoint(command, who))

        return await run_unary(context, "UpdateEndpoint", work)

    async def DeleteEndpoint(
        self, request: pb.DeleteEndpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteEndpointResponse:
        async def work() -> pb.DeleteEndpointResponse:
            name = validation.endpoint_name(request.name, "name")
            revision = validation.expected_revision(request.expected_revision)
            endpoint = await self.lifecycle.delete_endpoint(name, caller(), expected_revision=revision)
            return pb.DeleteEndpointResponse(endpoint=endpoint)

        return await run_unary(context, "DeleteEndpoint", work)

    async def ListDeployments(
        self, request: pb.ListDeploymentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDeploymentsResponse:
        async def work() -> pb.ListDeploymentsResponse:
            name = validation.endpoint_name(request.endpoint, "endpoint")
            page = validation.page(request.page_size, request.page_token)
            deployments, token = await self.lifecycle.list_deployments(
                name, caller(), include_stopped=request.include_stopped, page=page
            )
            return pb.ListDeploymentsResponse(deployments=deployments, next_page_token=token)

        return await run_unary(context, "ListDeployments", work)

    async def Promote(
        self, request: pb.PromoteRequest, context: grpc.aio.ServicerContext
    ) -> pb.PromoteResponse:
        async def work() -> pb.PromoteResponse:
            who = caller()
            name = validation.endpoint_name(request.endpoint, "endpoint")
            endpoint = await self.work.visible_endpoint(name, who)
            command = validation.promote_command(request, default_model=endpoint.spec.model)
            if command.engine is not None:
                validation.check_engine_models(
                    command.engine, self.model_roots, tenant=endpoint.spec.tenant, field="engine_config"
                )
            with bound_ids(endpoint=name, request=command.request_id):
                return pb.PromoteResponse(deployment=await self.deployments.promote(command, who))

        return await run_unary(context, "Promote", work)

    async def Rollback(
        self, request: pb.RollbackRequest, context: grpc.aio.ServicerContext
    ) -> pb.RollbackResponse:
        async def work() -> pb.RollbackResponse:
            command = validation.rollback_command(request)
            with bound_ids(endpoint=command.endpoint, request=command.request_id):
                return pb.RollbackResponse(deployment=await self.deployments.rollback(command, caller()))

        return await run_unary(context, "Rollback", work)

    async def WatchEvents(
        self, request: pb.WatchEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[events_pb2.Event]:
        who = caller()

        async def start() -> WatchFilter:
            filt = validation.watch_filter(request)
            if filt.endpoint and not who.all_tenants:  # operators may watch any name, even a deleted one
                await self.work.visible_endpoint(filt.endpoint, who)
            return filt

        filt = await run_unary(context, "WatchEvents", start)

        async def incarnation_of(endpoint: str) -> Incarnation | None:
            stored = await self.work.state.get_endpoint(endpoint)
            if stored is None:
                return None
            return Incarnation(
                tenant=stored.spec.tenant,
                created=stored.create_time.ToDatetime(tzinfo=UTC),
                uid=stored.uid,
            )

        async def live() -> None:  # initial metadata tells the client the watch is live
            await context.send_initial_metadata(())

        scope = TenantScope(who, incarnation_of)
        events = watch(self.work.state.js, filt, scope=scope, stopping=self.stopping, on_live=live)
        async for event in events:
            yield event
