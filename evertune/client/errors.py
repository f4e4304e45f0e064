"""The one error the client raises for a refused call."""

from __future__ import annotations

import grpc

from evertune.errors import EvertuneError


class RpcError(EvertuneError):
    """A call the server refused, or that could not reach it: `str()` is "CODE: detail"."""

    def __init__(self, code: grpc.StatusCode, detail: str) -> None:
        super().__init__(f"{code.name}: {detail}")
        self.code = code  #: the gRPC status
        self.detail = detail  #: the server's one-line detail (or why it could not be reached)
        self.grpc_status = code  # a server relaying this error answers with the same status


def rpc_error(err: grpc.aio.AioRpcError, *, address: str, service: str) -> RpcError:
    """`err` as an `RpcError`; an unreachable server says which address was tried."""
    code = err.code() or grpc.StatusCode.UNKNOWN
    detail = err.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        detail = f"cannot reach the {service} at {address}: {detail}"
    return RpcError(code, detail)
