"""NATS killed (SIGKILL) and restarted while traffic flows through the gateway to a sim endpoint
and a canary rollout is in progress.

The data path (client -> gateway -> engine) must not need NATS: every request succeeds, its
telemetry record waits in the gateway's spool and reaches ClickHouse once NATS is back (exactly one
row per request). The control plane reconnects and carries on: the rollout ends (promoted or
rolled back) and the endpoint's state is consistent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from evertune.apps.harness.waiting import eventually
from evertune.v1 import endpoint_pb2 as D
from tests.reliability.helpers import wait_rows
from tests.reliability.loop import (
    Traffic,
    check_consistent,
    create_endpoint,
    promote,
    rollout_finished,
    running_loop,
    sim_spec,
    weight_of,
)

pytestmark = pytest.mark.reliability

EVERY_S = 0.04  #: 25 requests/s through the gateway
REQUESTS = 500  #: 20 s of traffic
DOWN_S = 3.0  #: NATS is away this long


async def test_nats_killed_mid_rollout_loses_no_request_and_no_record(
    store_url: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    name = f"rel-nats-{uuid.uuid4().hex[:6]}"
    async with running_loop(tmp_path, store_url=store_url, model_dir=tokenizer_dir) as loop:
        stable = await create_endpoint(loop.stub, sim_spec(name, tokenizer_dir))
        await eventually(
            lambda: name in loop.stack.gateway.book.tables, timeout_s=10, what="the endpoint routed"
        )
        traffic = Traffic(loop.stack.gateway_url, name, every_s=EVERY_S, requests=REQUESTS)
        driving = asyncio.create_task(traffic.run())
        await asyncio.sleep(2.0)
        canary = await promote(loop.stub, name, max_num_seqs=32)

        async def canary_has_traffic() -> bool:
            return await weight_of(loop.stack.state, name, canary) > 0

        await eventually(canary_has_traffic, timeout_s=30, what="the canary's first step")
        killed = time.monotonic()
        await loop.stack.nats.kill()
        await asyncio.sleep(DOWN_S)
        await loop.stack.nats.restart()
        back = time.monotonic()
        await driving
        publisher = loop.stack.gateway.publisher
        assert publisher is not None
        assert publisher.stats.spooled_records > 0  # the outage was real: records went to the spool
        assert traffic.failures == []  # no request failed because NATS was away
        assert len(traffic.results) == len(traffic.sent) == REQUESTS

        final = await rollout_finished(loop.stack.state, name, canary, timeout_s=60)
        assert final in (D.DEPLOYMENT_STATE_ACTIVE, D.DEPLOYMENT_STATE_ROLLED_BACK)
        rows = await wait_rows(loop.store, name, REQUESTS, timeout_s=30)
        # (rows carry the gateway's request ids; nothing but this traffic goes to the endpoint)
        assert len(rows) == len(traffic.sent)  # a row for every request sent
        assert sorted(set(rows.values())) == [1]  # exactly one each
        consistent = await check_consistent(loop.stack.state, name)
        assert consistent.stable == (canary if final == D.DEPLOYMENT_STATE_ACTIVE else stable)
        print(
            f"\nloop-nats-restart: requests={REQUESTS} failed=0 rows={sum(rows.values())}"
            f" spooled={publisher.stats.spooled_records} drained={publisher.stats.drained_records}"
            f" down_s={back - killed:.1f} canary_final={D.DeploymentState.Name(final)}"
            f" engines={consistent.engine_pids}"
        )
