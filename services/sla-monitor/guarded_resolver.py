"""The alert sender's DNS resolver: aiohttp's, less the addresses the outbound policy refuses.

Checked when an alert is sent, so a name that resolved to a public address when its route was
created and to an internal one now is refused too (see `evertune.infra.outbound`).
"""

from __future__ import annotations

import ipaddress
import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from evertune.infra.outbound import OutboundPolicy


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, less the addresses `policy` refuses: a name that resolves only to those
    fails the connection (an OSError, which the dispatcher retries and finally drops)."""

    def __init__(self, policy: OutboundPolicy) -> None:
        self.policy = policy
        self._resolver = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._resolver.resolve(host, port, family)
        kept = [r for r in results if not self.policy.refuses(ipaddress.ip_address(r["host"]))]
        if not kept:
            raise OSError(f"{host} resolves only to internal addresses alerts may not reach")
        return kept

    async def close(self) -> None:
        await self._resolver.close()
