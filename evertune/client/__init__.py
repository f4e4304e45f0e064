"""evertune's gRPC client: the deployer's EndpointService and the searcher's SearchService, typed,
with the credentials, TLS and retry rules the `evertune` command line uses (it is built on this).

    from evertune.client import Connection, EndpointClient

    async with EndpointClient(Connection(address="deployer:50051", token=token)) as endpoints:
        for endpoint in await endpoints.list():
            print(endpoint.spec.name, endpoint.state)

Messages are the wire's protobuf types (`evertune.v1`). A refused call raises `RpcError` (one line:
the status and the server's detail); a call the server never took (UNAVAILABLE) is tried again
when that is safe (see `connection.RETRIED`). Depends on grpcio and protobuf only: no engine, model or
store code.
"""

from evertune.client.connection import Connection
from evertune.client.endpoints import EndpointClient
from evertune.client.errors import RpcError
from evertune.client.searches import SearchClient

__all__ = ["Connection", "EndpointClient", "RpcError", "SearchClient"]
