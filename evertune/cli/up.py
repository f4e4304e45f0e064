"""`evertune up`: embedded NATS, the store and every service in one process.

chDB allows one engine per process, so the embedded default runs all services that use the store
in this one process; in production each service runs alone (`evertune run`) against a NATS cluster
and a ClickHouse server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

from evertune.cli.common import shared_settings, stop_on_signals
from evertune.data_dir import DataDirLock, Runtime, remove_runtime, write_runtime
from evertune.nats_server import EmbeddedNats
from evertune.runtime import Service
from evertune.runtime.host import host_services
from evertune.services import SERVICE_NAMES, create_service
from evertune.settings import SharedSettings

DEMO_NOTE = (
    "demo: the stack is up. The closed loop (voice traffic through the gateway, profile, search, "
    "verify, rollout, drift) arrives with the loop work; this run shows the services only."
)


def up(*, data_dir: Path | None, duration_s: float | None, demo: bool) -> int:
    shared = shared_settings(data_dir)
    lock = DataDirLock(shared.data_dir.expanduser())
    lock.acquire()
    try:
        return asyncio.run(_up(shared, duration_s=duration_s, demo=demo))
    finally:
        remove_runtime(lock.data_dir)
        lock.release()


async def _up(shared: SharedSettings, *, duration_s: float | None, demo: bool) -> int:
    started = time.monotonic()
    stop = asyncio.Event()
    stop_on_signals(stop)
    data_dir = shared.data_dir.expanduser()
    services = [create_service(name) for name in SERVICE_NAMES]
    nats: EmbeddedNats | None = None
    nats_url = shared.nats_url
    if not nats_url:
        nats = EmbeddedNats(data_dir / "nats")
        await nats.start()
        nats_url = nats.url

    def ready(running: Sequence[Service]) -> None:
        listen = {s.name: ", ".join(f"{k} {v}" for k, v in s.listen().items()) for s in running}
        write_runtime(
            data_dir,
            Runtime(
                pid=os.getpid(),
                nats_url=nats_url,
                clickhouse_url=shared.store_url,
                started_at=time.time(),
                listen={k: v for k, v in listen.items() if v},
            ),
        )
        print(f"evertune up: data dir {data_dir}", flush=True)
        print(f"  nats        {nats_url}{' (embedded)' if nats else ''}", flush=True)
        print(f"  clickhouse  {shared.store_url}", flush=True)
        for name, where in listen.items():
            print(f"  {name:<11} running{'  ' + where if where else ''}", flush=True)
        print(f"ready in {time.monotonic() - started:.1f} s; Ctrl-C stops", flush=True)
        if demo:
            print(DEMO_NOTE, flush=True)

    timer = asyncio.get_running_loop().call_later(duration_s, stop.set) if duration_s else None
    try:
        await host_services(services, shared=shared, nats_url=nats_url, stop=stop, on_ready=ready)
    finally:
        if timer is not None:
            timer.cancel()
        if nats is not None:
            with contextlib.suppress(Exception):
                await nats.stop()
    print("evertune up: stopped", flush=True)
    return 0
