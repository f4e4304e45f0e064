"""The deployer SIGKILLed in the middle of a canary rollout, then started again.

The deployer and the profiler's sink (the store-using services of `evertune up`) run in a process
of their own with their own chDB folder; the gateway runs here; traffic flows through the gateway
all along. The test kills the deployer's process at the canary's second step: its engines die with
it (parent-death signal), and a new deployer process on the same NATS and store resumes from KV:
the stable deployment is started again, the canary continued from its step. Afterwards the rollout
has ended (promoted or rolled back), the route weights sum to 10000 with all of it on the stable
deployment, that deployment is ACTIVE, and the only engine processes of the endpoint are the
stable's (none of the killed deployer's engines survived it, none of the canary's is left over).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from evertune.apps.harness.waiting import eventually
from evertune.deployer.state import State
from evertune.gateway import GatewayService, GatewaySettings
from evertune.infra.bus import connect
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2_grpc as pb_grpc
from tests.reliability.loop import (
    Traffic,
    alive,
    check_consistent,
    create_endpoint,
    engine_processes,
    promote,
    rollout_finished,
    sim_spec,
    weight_of,
)

pytestmark = pytest.mark.reliability


@contextlib.asynccontextmanager
async def deployer_process(
    nats_url: str, store_dir: Path, data_dir: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, pb_grpc.EndpointServiceStub]]:
    """A deployer (and sink) process, and a stub on its API; SIGTERMed at the end if still alive."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.reliability.deployer_process",
        "--nats", nats_url, "--store", f"chdb://{store_dir}", "--data-dir", str(data_dir),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    channel: grpc.aio.Channel | None = None
    try:
        assert proc.stdout is not None
        while True:  # its log goes to stdout too: the ready line is the JSON one
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line, "the deployer process exited before it was ready"
            if line.startswith(b"{"):
                break
        drain = asyncio.create_task(_drain(proc))
        channel = grpc.aio.insecure_channel(json.loads(line)["grpc"])
        yield proc, pb_grpc.EndpointServiceStub(channel)  # type: ignore[no-untyped-call]
    finally:
        if channel is not None:
            await channel.close()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if "drain" in locals():
            drain.cancel()


async def _drain(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while await proc.stdout.readline():
        pass


async def test_a_deployer_killed_mid_canary_resumes_and_leaves_a_consistent_endpoint(
    store_url: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    nats = EmbeddedNats(tmp_path / "nats")
    await nats.start()
    name = f"rel-dep-{uuid.uuid4().hex[:6]}"
    gateway = GatewayService(GatewaySettings(port=0, tokenizer_dir=tokenizer_dir, batch_ms=20.0))
    shared = load_settings(SharedSettings, data_dir=tmp_path / "gateway", clickhouse_url=store_url)
    stop, ready = asyncio.Event(), asyncio.Event()
    hosting = asyncio.create_task(
        host_services([gateway], shared=shared, nats_url=nats.url, stop=stop, on_ready=lambda _: ready.set())
    )
    nc = await connect(nats.url, name="reliability-deployer-test")
    driving: asyncio.Task[None] | None = None
    try:
        await asyncio.wait_for(ready.wait(), 60)
        state = await State.open(nc.jetstream())
        store_dir, data_dir = tmp_path / "store", tmp_path / "deployer"
        async with deployer_process(nats.url, store_dir, data_dir) as (first, stub):
            stable = await create_endpoint(stub, sim_spec(name, tokenizer_dir))
            await eventually(lambda: name in gateway.book.tables, timeout_s=10, what="the endpoint routed")
            traffic = Traffic(f"http://127.0.0.1:{gateway.port}", name, every_s=0.05, requests=2000)
            driving = asyncio.create_task(traffic.run())
            await asyncio.sleep(1.0)
            canary = await promote(stub, name, max_num_seqs=64)  # the same configuration: it should pass

            async def at_half() -> bool:
                return await weight_of(state, name, canary) == 5000

            await eventually(at_half, timeout_s=60, what="the canary at 50%")
            engines_before = engine_processes(name)
            assert len(engines_before) == 2  # the stable's engine and the canary's
            first.send_signal(signal.SIGKILL)
            await first.wait()
        # the killed deployer's engines die with it (parent-death signal): no orphan
        await eventually(
            lambda: not any(alive(pid) for pid in engines_before),
            timeout_s=10,
            what="engines of the killed deployer gone",
        )
        record = await state.get_rollout(name)
        assert record is not None and record.deployment_id == canary  # left mid-rollout
        async with deployer_process(nats.url, store_dir, data_dir) as (_, stub):
            final = await rollout_finished(state, name, canary, timeout_s=90)
            assert final in (D.DEPLOYMENT_STATE_ACTIVE, D.DEPLOYMENT_STATE_ROLLED_BACK)

            async def drained() -> bool:  # the replaced deployment's engines stop after its drain
                return len(engine_processes(name)) == 1

            await eventually(drained, timeout_s=30, what="one engine left")
            consistent = await check_consistent(state, name)
            assert consistent.stable == (canary if final == D.DEPLOYMENT_STATE_ACTIVE else stable)
            assert not set(consistent.engine_pids) & set(engines_before)  # started again, not left over
            driving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driving
            failed = len(traffic.failures)
        assert engine_processes(name) == {}  # a clean stop stops its engines
        print(
            f"\nloop-deployer-killed: canary_final={D.DeploymentState.Name(final)} step_at_kill={record.step}"
            f" requests_done={len(traffic.results)} failed_while_engines_restarted={failed}"
            f" engines_before={sorted(engines_before)} engines_after={consistent.engine_pids}"
        )
    finally:
        if driving is not None and not driving.done():
            driving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driving
        await nc.close()
        stop.set()
        await asyncio.wait_for(hosting, 60)
        await nats.stop()
