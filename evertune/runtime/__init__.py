"""The service runtime: one lifecycle, micro-service API, gRPC servers, hosting."""

from evertune.runtime.grpc_server import GrpcServer, GrpcService, run_unary
from evertune.runtime.service import Service, ServiceContext

__all__ = ["GrpcServer", "GrpcService", "Service", "ServiceContext", "run_unary"]
