"""The service runtime: one lifecycle, micro-service API, gRPC servers, hosting."""

from evertune.runtime.grpc_server import GrpcServer
from evertune.runtime.service import Service, ServiceContext

__all__ = ["GrpcServer", "Service", "ServiceContext"]
