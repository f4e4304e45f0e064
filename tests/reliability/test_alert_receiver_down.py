"""An alert receiver down (connection refused, then 503s) while an SLO breach opens and resolves:
the monitor decides and publishes both events meanwhile, never waiting on the receiver, and once it
is back the receiver gets the breach and then the resolve, each exactly once.

Real parts: the SLA monitor service on the session's nats-server, fed telemetry batches whose TTFT
jumps and recovers; its AlertDispatcher delivering to a local HTTP server whose behaviour the test
switches: closed port -> 503 -> 200.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiohttp import web
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import publish
from evertune.infra.events import event_filter_subject
from evertune.infra.nats_server import free_port
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings, load_settings
from evertune.sla_monitor import SlaMonitorService, SlaMonitorSettings
from evertune.sla_monitor.burn_rate import BurnRateRule
from evertune.v1 import events_pb2
from tests.sla_monitor.helpers import record_batch

pytestmark = pytest.mark.reliability

UNAVAILABLE = 3  #: 503 answers after the port opens, before the receiver takes alerts


class Receiver:
    """A webhook receiver: closed until `open()`, then 503 `UNAVAILABLE` times, then 200."""

    def __init__(self) -> None:
        self.port = free_port()
        self.hits = 0  #: requests that reached it
        self.refused_503 = 0  #: requests answered 503
        self.bodies: list[dict[str, Any]] = []  #: bodies answered 200
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: web.Request) -> web.Response:
        self.hits += 1
        body = await request.json()
        if self.refused_503 < UNAVAILABLE:
            self.refused_503 += 1
            return web.Response(status=503, text="down for maintenance")
        self.bodies.append(body)
        return web.Response(status=200, text="ok")

    async def open(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def test_alert_reaches_a_receiver_that_was_down_and_the_monitor_never_waited(
    nc: Any, js: JetStreamContext
) -> None:
    endpoint = f"rx-{uuid.uuid4().hex[:10]}"
    receiver = Receiver()
    settings = load_settings(
        SlaMonitorSettings,
        durable=f"rx-{uuid.uuid4().hex[:10]}",
        subject=f"evertune.telemetry.{endpoint}",
        evaluate_interval_s=0.2,
        slot_s=0.5,
        sketch_history_s=10,
        resolve_hold_s=1.0,
        min_requests=10,
        deployment_alerts=False,
        drift=False,
        metrics_port=-1,
        rules=[BurnRateRule(name="page-fast", long_window_s=4, short_window_s=1, burn_rate=6.0)],
        ttft_p99_ms=200.0,
        itl_p99_ms=50.0,
        attainment_target=0.9,
        receivers=[{"kind": "webhook", "url": receiver.url, "name": "hook"}],
        retry_base_s=0.1,
        retry_cap_s=0.4,
        receiver_timeout_s=1.0,
    )
    service = SlaMonitorService(settings)
    events: list[events_pb2.Event] = []

    async def on_event(msg: Msg) -> None:
        events.append(events_pb2.Event.FromString(msg.data))

    sub = await js.subscribe(
        event_filter_subject(endpoint=endpoint), stream="EVENTS", ordered_consumer=True, cb=on_event
    )
    await service.start(ServiceContext(shared=load_settings(SharedSettings), nc=nc, js=js, store=None))
    ticks: list[float] = []  # the test's own loop lag: the monitor shares this event loop

    async def send_until(ttft_ms: float, kind: str, timeout_s: float) -> None:
        start = time.monotonic()
        while not any(e.kind == kind for e in events):
            assert time.monotonic() - start < timeout_s, f"no {kind} within {timeout_s} s"
            b = record_batch(endpoint, ttft_ms=ttft_ms)
            await publish(js, settings.subject, b, msg_id=b.batch_id)
            before = time.monotonic()
            await asyncio.sleep(0.1)
            ticks.append(time.monotonic() - before - 0.1)

    try:
        for _ in range(10):  # healthy traffic first
            b = record_batch(endpoint, ttft_ms=80.0)
            await publish(js, settings.subject, b, msg_id=b.batch_id)
            await asyncio.sleep(0.1)
        await send_until(800.0, "sla.breach", timeout_s=15)
        await send_until(80.0, "sla.resolved", timeout_s=15)
        # Both decided and published while the receiver refused every connection.
        stats = service.status()["receivers"]["hook"]
        assert receiver.hits == 0 and stats["delivered"] == 0 and stats["pending"] == 2
        assert stats["retried"] >= 2
        retried_while_closed = stats["retried"]
        seen = service.status()["records_seen"]

        await receiver.open()  # 503s first, then 200
        opened = time.monotonic()
        await eventually(lambda: len(receiver.bodies) == 2, timeout_s=10, what="both alerts delivered")
        delivered_after_s = time.monotonic() - opened
        await asyncio.sleep(0.5)  # nothing more may follow
        stats = service.status()["receivers"]["hook"]
        breach = next(e for e in events if e.kind == "sla.breach")
        print(
            f"\nreceiver-down: retried_while_closed={retried_while_closed}"
            f" answered_503={receiver.refused_503} hits={receiver.hits} delivered={stats['delivered']}"
            f" delivered_after_open_s={delivered_after_s:.2f}"
            f" records_seen={seen} max_loop_lag_ms={max(ticks) * 1000:.1f}"
        )
        assert [b["status"] for b in receiver.bodies] == ["firing", "resolved"]
        assert {b["breach_id"] for b in receiver.bodies} == {breach.sla_breach.breach_id}
        assert receiver.refused_503 == UNAVAILABLE and receiver.hits == UNAVAILABLE + 2
        assert stats["delivered"] == 2 and stats["pending"] == 0 and stats["dropped"] == 0
        assert max(ticks) < 0.5  # the loop the monitor runs on was never held up
    finally:
        await service.stop(5.0)
        await sub.unsubscribe()
        await js.delete_consumer("TELEMETRY", settings.durable)
        await receiver.close()
