"""The service runtime: one lifecycle, micro-service API, gRPC servers, hosting."""

from evertune.infra.runtime.grpc_server import GrpcServer, GrpcService, run_unary
from evertune.infra.runtime.service import Service, ServiceContext

__all__ = ["GrpcServer", "GrpcService", "Service", "ServiceContext", "run_unary"]
