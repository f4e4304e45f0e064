"""The NATS micro-service API for evertune services: ping, info, stats, and a `status` endpoint.

Every running service instance answers `$SRV.PING|INFO|STATS`. Its `status` endpoint (subject
`evertune.svc.<name>.status`) answers with the instance's state; the same state is carried in the
stats reply (`endpoints[0].data`), so `evertune status` learns everything from one STATS round.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointStats
from nats.micro.service import Service as MicroService

import evertune
from evertune.infra.runtime.service import Service

STATUS_ENDPOINT = "status"


async def register(nc: Client, service: Service) -> MicroService:
    """Announce `service` on the micro API; stop the returned object when the service stops."""

    def stats(_: EndpointStats) -> dict[str, Any]:
        return service.status()

    micro = await add_service(
        nc,
        name=service.name,
        version=evertune.__version__,
        description=service.description,
        metadata={"pid": str(os.getpid())},
        stats_handler=stats,
    )

    async def status(request: Request) -> None:
        await request.respond(json.dumps(service.status()).encode())

    await micro.add_endpoint(
        name=STATUS_ENDPOINT, subject=f"evertune.svc.{service.name}.{STATUS_ENDPOINT}", handler=status
    )
    return micro


@dataclass(frozen=True)
class InstanceStatus:
    """One running service instance, as `evertune status` reports it."""

    name: str  #: service name
    id: str  #: micro instance id
    version: str  #: evertune version it runs
    started: str  #: when it started (UTC, ISO)
    state: str  #: lifecycle state ("running", "stopping", ...)
    pid: str  #: process id on its host
    details: dict[str, Any] = field(default_factory=dict)  #: listen addresses and service figures


async def discover(nc: Client, *, wait_s: float = 1.0, expect: int | None = None) -> list[InstanceStatus]:
    """Scatter-gather `$SRV.STATS`: every instance that answers within `wait_s` seconds.

    Returns early once `expect` instances have answered.
    """
    inbox = nc.new_inbox()
    replies: asyncio.Queue[bytes] = asyncio.Queue()

    async def collect(msg: Any) -> None:
        if msg.data:  # an empty reply is the server's "no responders" status, not a service
            await replies.put(msg.data)

    sub = await nc.subscribe(inbox, cb=collect)
    try:
        await nc.publish("$SRV.STATS", b"", reply=inbox)
        await nc.flush()
        found: list[InstanceStatus] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while expect is None or len(found) < expect:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                data = await asyncio.wait_for(replies.get(), remaining)
            except TimeoutError:
                break
            found.append(_parse(json.loads(data)))
    finally:
        await sub.unsubscribe()
    return sorted(found, key=lambda s: (s.name, s.id))


def _parse(stats: dict[str, Any]) -> InstanceStatus:
    data: dict[str, Any] = {}
    for endpoint in stats.get("endpoints") or []:
        if endpoint.get("name") == STATUS_ENDPOINT and isinstance(endpoint.get("data"), dict):
            data = dict(endpoint["data"])
    return InstanceStatus(
        name=stats["name"],
        id=stats["id"],
        version=stats.get("version", ""),
        started=stats.get("started", ""),
        state=str(data.pop("state", "unknown")),
        pid=str((stats.get("metadata") or {}).get("pid", "")),
        details=data,
    )
