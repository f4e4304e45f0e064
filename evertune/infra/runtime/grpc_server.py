"""gRPC servers for services: the service's own servicers plus standard health and reflection.

A server optionally takes server interceptors (authentication), TLS credentials (the port then
speaks TLS only, mutual TLS when they require client certificates: `evertune.infra.runtime.tls`)
and its own message-size cap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import grpc
import nats.errors
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from evertune.errors import EvertuneError, Unavailable
from evertune.infra.runtime.service import Service, ServiceContext

#: Largest request or response a server accepts (bytes).
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class GrpcServer:
    """An asyncio gRPC server with health and reflection. `await start()`, `.address`, `await stop()`.

    `interceptors` run before every handler (health and reflection included: an interceptor lets
    those through itself); `credentials` make the port TLS-only; `max_message_bytes` caps requests
    and responses (larger is RESOURCE_EXHAUSTED).
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        add_servicers: Sequence[Callable[[grpc.aio.Server], None]] = (),
        service_names: Sequence[str] = (),
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        credentials: grpc.ServerCredentials | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._host = host
        self._port = port
        self._add_servicers = add_servicers
        self._service_names = list(service_names)
        self._interceptors = list(interceptors)
        self._credentials = credentials
        self._max_message_bytes = max_message_bytes
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self.port = 0

    @property
    def address(self) -> str:
        return f"{self._host}:{self.port}"

    @property
    def tls(self) -> bool:
        """Whether the port speaks TLS."""
        return self._credentials is not None

    async def start(self) -> None:
        server = grpc.aio.server(
            interceptors=self._interceptors,
            options=[
                ("grpc.max_receive_message_length", self._max_message_bytes),
                ("grpc.max_send_message_length", self._max_message_bytes),
                # gRPC sets SO_REUSEPORT by default, so a second server on a taken port would
                # silently share it; a taken port must be an error instead.
                ("grpc.so_reuseport", 0),
            ],
        )
        for add in self._add_servicers:
            add(server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        names = [
            *self._service_names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ]
        reflection.enable_server_reflection(names, server)
        address = f"{self._host}:{self._port}"
        try:
            if self._credentials is not None:
                self.port = server.add_secure_port(address, self._credentials)
            else:
                self.port = server.add_insecure_port(address)
        except RuntimeError as err:
            raise Unavailable(f"cannot listen on {address}: {err}") from None
        if self.port == 0:
            raise Unavailable(f"cannot listen on {self._host}:{self._port} (port in use?)")
        await server.start()
        self._server = server
        for name in ["", *self._service_names]:
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace_s: float) -> None:
        """Report NOT_SERVING, let in-flight calls finish within `grace_s`, then close."""
        if self._server is None:
            return
        await self._health.enter_graceful_shutdown()
        await self._server.stop(grace_s)
        self._server = None


class GrpcService(Service):
    """A service whose face is one gRPC server: started with the service, stopped with grace.

    Subclasses pass their servicers (functions adding them to the server), the full names of
    their gRPC services (for health and reflection), and optionally interceptors and TLS
    credentials (`evertune.infra.runtime.tls`).
    """

    #: Seconds in-flight calls get to finish at stop.
    grace_s: float = 5.0

    def __init__(
        self,
        *,
        host: str,
        port: int,
        add_servicers: Sequence[Callable[[grpc.aio.Server], None]] = (),
        service_names: Sequence[str] = (),
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        super().__init__()
        self.grpc = GrpcServer(
            host=host,
            port=port,
            add_servicers=add_servicers,
            service_names=service_names,
            interceptors=interceptors,
            credentials=credentials,
        )

    async def on_start(self, ctx: ServiceContext) -> None:
        await self.grpc.start()

    async def on_stop(self) -> None:
        await self.grpc.stop(grace_s=self.grace_s)

    def listen(self) -> dict[str, str]:
        return {**({"grpc": self.grpc.address} if self.grpc.port else {}), **super().listen()}


T = TypeVar("T")


async def run_unary(context: grpc.aio.ServicerContext, method: str, work: Callable[[], Awaitable[T]]) -> T:
    """Run one RPC's `work` within the caller's deadline; the one place a handler's errors become
    gRPC statuses with one-line details: an `EvertuneError` its own status, the deadline
    DEADLINE_EXCEEDED, a dependency's timeout or NATS error UNAVAILABLE."""
    remaining = context.time_remaining()
    timeout = asyncio.timeout(remaining if remaining is not None and remaining > 0 else None)
    try:
        async with timeout:
            return await work()
    except TimeoutError:
        if timeout.expired():
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"{method}: the deadline ran out")
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"{method}: a dependency timed out")
    except EvertuneError as err:
        await context.abort(err.grpc_status, str(err))
    except nats.errors.Error as err:
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"{method}: NATS: {str(err) or type(err).__name__}")
    raise AssertionError("unreachable: abort raises")
