"""The demo's alert receiver: a local HTTP server that takes the sla-monitor's webhook POSTs, as
an on-call system would, so the report can show a breach alert delivered and then resolved.

It listens on loopback on a free port; the demo endpoint's alert route points at `url`. Each
POST's JSON body is kept with the demo-clock time it arrived; a body that is not a JSON object is
answered 400 and not kept.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

#: Path the receiver takes alerts on.
ALERT_PATH = "/alerts"


@dataclass(frozen=True)
class Delivered:
    """One alert as the receiver got it."""

    t_s: float  #: arrival, seconds on the demo's clock
    kind: str  #: "sla.breach" or "sla.resolved" (the payload's `kind`)
    body: dict[str, Any]  #: the whole payload (see `evertune.sla_monitor.payloads.webhook_payload`)

    @property
    def line(self) -> str:
        """One line for the terminal and the report."""
        summary = str(self.body.get("summary", "")).strip()
        return f"alert delivered to the local webhook: {self.kind} {summary}".rstrip()


class AlertReceiver:
    """`async with AlertReceiver(t0=...) as receiver:` serves until the block ends."""

    def __init__(self, *, t0: float, on_delivered: Callable[[Delivered], None] | None = None) -> None:
        self.t0 = t0  #: the demo clock's zero, Unix seconds
        self.on_delivered = on_delivered  #: called with each alert as it arrives
        self.delivered: list[Delivered] = []  #: alerts received, in arrival order
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def url(self) -> str:
        """Where the alert route must POST."""
        if not self._port:
            raise RuntimeError("the alert receiver is not listening")
        return f"http://127.0.0.1:{self._port}{ALERT_PATH}"

    async def __aenter__(self) -> AlertReceiver:
        app = web.Application()
        app.router.add_post(ALERT_PATH, self._take)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _take(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body is not a JSON object"}, status=400)
        alert = Delivered(t_s=time.time() - self.t0, kind=str(body.get("kind", "")), body=body)
        self.delivered.append(alert)
        if self.on_delivered is not None:
            self.on_delivered(alert)
        return web.json_response({"ok": True})
