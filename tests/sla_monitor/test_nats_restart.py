"""The sla-monitor on a private nats-server that is killed and restarted (same port and store dir):
an endpoint put into the `endpoints` bucket and a profile.ready published after the restart both
reach the service (its KV watch and its ordered consumer are made again after the reconnect)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import Bucket, connect, declare, load_definitions, publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings, load_settings
from evertune.sla_monitor import SlaMonitorService
from evertune.v1 import events_pb2
from tests.sla_monitor.test_wiring import _endpoint, _settings


def _ready(profile_id: str) -> events_pb2.ProfileReady:
    ready = events_pb2.ProfileReady(
        profile_id=profile_id,
        request_count=5000,
        summary=events_pb2.WorkloadSummary(rate_rps=20, prompt_tokens_p50=800, completion_tokens_p50=11),
    )
    ready.window_start.FromSeconds(int(time.time()) - 250)
    ready.window_end.FromSeconds(int(time.time()))
    return ready


async def test_endpoints_and_profiles_after_a_nats_restart_reach_the_service(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    nc = await connect(server.url, name="sla-restart-test")
    endpoint = f"ep-{uuid.uuid4().hex[:8]}"
    service: SlaMonitorService | None = None
    try:
        js = nc.jetstream()
        await declare(js, load_definitions())
        service = SlaMonitorService(_settings(endpoint, metrics_port=-1))
        await service.start(ServiceContext(shared=load_settings(SharedSettings), nc=nc, js=js, store=None))
        await publish_event(
            js,
            new_event(
                EventKind.PROFILE_READY, endpoint=endpoint, source="test", payload_message=_ready("p1")
            ),
        )
        await eventually(
            lambda: service.profile_ids.get(endpoint) == "p1",
            timeout_s=5,
            what="profile.ready before the restart",
        )

        before = nc.stats["reconnects"]
        await server.kill()
        await asyncio.sleep(0.5)
        await server.restart()
        await eventually(lambda: nc.stats["reconnects"] > before, timeout_s=15, what="the reconnect")

        bucket = await Bucket.open(js, "endpoints")
        await bucket.mutate(endpoint, lambda _: _endpoint(endpoint, ttft_ms=250.0, routes=[], stable="dep-a"))
        await eventually(
            lambda: service.registry.get(endpoint) is not None,
            timeout_s=15,
            what="the endpoint put after the restart",
        )
        assert service.slo_for(endpoint).ttft_ms == 250.0
        await publish_event(
            js,
            new_event(
                EventKind.PROFILE_READY, endpoint=endpoint, source="test", payload_message=_ready("p2")
            ),
        )
        await eventually(
            lambda: service.profile_ids.get(endpoint) == "p2",
            timeout_s=15,
            what="profile.ready after the restart",
        )
    finally:
        if service is not None:
            await service.stop(5.0)
        await nc.close()
        await server.stop()
