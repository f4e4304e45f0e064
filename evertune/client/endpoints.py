"""The deployer's EndpointService: endpoints, their deployments, promotions and roll backs."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import AsyncIterator
from typing import TypeVar

from evertune.client.connection import Connection, ServiceClient
from evertune.v1 import endpoint_pb2, events_pb2
from evertune.v1 import endpoint_service_pb2 as pb
from evertune.v1 import endpoint_service_pb2_grpc as pb_grpc

Reply = TypeVar("Reply")


class EndpointClient(ServiceClient):
    """A client of one deployer; use it as an async context manager (it owns its channel)."""

    service = "deployer"

    def __init__(self, connection: Connection) -> None:
        super().__init__(connection, stub=pb_grpc.EndpointServiceStub)

    async def create(self, spec: endpoint_pb2.EndpointSpec, *, request_id: str = "") -> endpoint_pb2.Endpoint:
        """Create an endpoint (retried safely: the request id makes a second try answer the first's)."""
        request = pb.CreateEndpointRequest(request_id=request_id or uuid.uuid4().hex, spec=spec)
        reply: pb.CreateEndpointResponse = await self._call("CreateEndpoint", request)
        return reply.endpoint

    async def get(self, name: str) -> endpoint_pb2.Endpoint:
        reply: pb.GetEndpointResponse = await self._call("GetEndpoint", pb.GetEndpointRequest(name=name))
        return reply.endpoint

    async def list(self, *, tenant: str = "") -> builtins.list[endpoint_pb2.Endpoint]:
        """Every endpoint the caller may see (of `tenant`, for an operator's token), all pages."""
        request = pb.ListEndpointsRequest(tenant=tenant)
        return await self._pages("ListEndpoints", request, items="endpoints")

    async def update(self, request: pb.UpdateEndpointRequest) -> endpoint_pb2.Endpoint:
        """Change the fields `request.update_mask` names (tried once)."""
        reply: pb.UpdateEndpointResponse = await self._call("UpdateEndpoint", request)
        return reply.endpoint

    async def delete(self, name: str, *, expected_revision: int = 0) -> endpoint_pb2.Endpoint:
        """Delete an endpoint (tried once)."""
        request = pb.DeleteEndpointRequest(name=name, expected_revision=expected_revision)
        reply: pb.DeleteEndpointResponse = await self._call("DeleteEndpoint", request)
        return reply.endpoint

    async def deployments(
        self, endpoint: str, *, include_stopped: bool = False
    ) -> builtins.list[endpoint_pb2.Deployment]:
        """An endpoint's deployments (the stopped ones too with `include_stopped`), all pages."""
        request = pb.ListDeploymentsRequest(endpoint=endpoint, include_stopped=include_stopped)
        return await self._pages("ListDeployments", request, items="deployments")

    async def promote(
        self,
        endpoint: str,
        *,
        trial_id: str = "",
        engine_config: endpoint_pb2.EngineConfig | None = None,
        reason: str = "",
        request_id: str = "",
    ) -> endpoint_pb2.Deployment:
        """Roll out a trial's configuration (`trial_id`) or a given one (`engine_config`)."""
        request = pb.PromoteRequest(
            endpoint=endpoint, request_id=request_id or uuid.uuid4().hex, reason=reason
        )
        if trial_id:
            request.trial_id = trial_id
        elif engine_config is not None:
            request.engine_config.CopyFrom(engine_config)
        reply: pb.PromoteResponse = await self._call("Promote", request)
        return reply.deployment

    async def rollback(
        self, endpoint: str, *, to_deployment_id: str = "", reason: str = "", request_id: str = ""
    ) -> endpoint_pb2.Deployment:
        """Roll back to the previous deployment, or to `to_deployment_id`."""
        request = pb.RollbackRequest(
            endpoint=endpoint,
            request_id=request_id or uuid.uuid4().hex,
            to_deployment_id=to_deployment_id,
            reason=reason,
        )
        reply: pb.RollbackResponse = await self._call("Rollback", request)
        return reply.deployment

    async def watch_events(self, request: pb.WatchEventsRequest) -> AsyncIterator[events_pb2.Event]:
        """The endpoint events `request` selects, as the deployer streams them (not retried: a
        watcher that reconnects resumes from the last event's time with `since`)."""
        async for event in self._stream("WatchEvents", request):
            yield event
