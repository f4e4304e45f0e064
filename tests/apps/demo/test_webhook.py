"""The demo's alert receiver, on loopback, driven by a real HTTP client."""

from __future__ import annotations

import time

import aiohttp

from evertune.apps.demo.webhook import AlertReceiver, Delivered


async def test_alerts_are_kept_in_order_and_bad_bodies_are_refused() -> None:
    seen: list[Delivered] = []
    async with AlertReceiver(t0=time.time(), on_delivered=seen.append) as receiver:
        assert receiver.url.startswith("http://127.0.0.1:") and receiver.url.endswith("/alerts")
        async with aiohttp.ClientSession() as session:
            for body in ({"kind": "sla.breach", "summary": "p99 over"}, {"kind": "sla.resolved"}):
                async with session.post(receiver.url, json=body) as response:
                    assert response.status == 200
            async with session.post(receiver.url, data=b"not json") as response:
                assert response.status == 400
            async with session.post(receiver.url, json=[1, 2]) as response:
                assert response.status == 400
    assert [a.kind for a in receiver.delivered] == ["sla.breach", "sla.resolved"]
    assert seen == receiver.delivered
    assert receiver.delivered[0].line == "alert delivered to the local webhook: sla.breach p99 over"
    assert receiver.delivered[0].t_s >= 0
