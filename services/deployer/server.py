"""The deployer's gRPC server: the core GrpcServer (health, reflection, no SO_REUSEPORT) plus the
auth interceptor, optional TLS and the deployer's message-size cap.

This subclass exists because `evertune.runtime.GrpcServer` takes neither interceptors nor
credentials yet; once it does, this file shrinks to building those two arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from evertune.errors import SettingsError, Unavailable
from evertune.runtime import GrpcServer


def server_credentials(cert_file: Path, key_file: Path) -> grpc.ServerCredentials:
    """TLS credentials from PEM files; a missing or unreadable file is a one-line SettingsError."""
    try:
        cert = cert_file.read_bytes()
        key = key_file.read_bytes()
    except OSError as err:
        raise SettingsError(f"cannot read TLS file {err.filename}: {err.strerror}") from None
    return grpc.ssl_server_credentials([(key, cert)])


class DeployerGrpcServer(GrpcServer):
    """GrpcServer with interceptors, optional TLS credentials and a message-size cap."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        add_servicers: Sequence[Callable[[grpc.aio.Server], None]] = (),
        service_names: Sequence[str] = (),
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        credentials: grpc.ServerCredentials | None = None,
        max_message_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        super().__init__(host=host, port=port, add_servicers=add_servicers, service_names=service_names)
        self._interceptors = list(interceptors)
        self._credentials = credentials
        self._max_message_bytes = max_message_bytes

    @property
    def tls(self) -> bool:
        return self._credentials is not None

    async def start(self) -> None:
        server = grpc.aio.server(
            interceptors=self._interceptors,
            options=[
                ("grpc.max_receive_message_length", self._max_message_bytes),
                ("grpc.max_send_message_length", self._max_message_bytes),
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
            raise Unavailable(f"cannot listen on {address} (port in use? set EVERTUNE_DEPLOYER_GRPC_PORT)")
        await server.start()
        self._server = server
        for name in ["", *self._service_names]:
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
