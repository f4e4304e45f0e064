"""The store-using services of `evertune up` (the deployer and the profiler's telemetry sink) in a
process of their own, for the deployer-kill test (run with `python -m`).

    python -m tests.reliability.deployer_process --nats URL --store chdb:///dir --data-dir DIR

Prints one JSON line `{"grpc": "host:port", "pid": n}` once the services run, then runs until it is
killed (SIGKILL: the test's crash) or stopped (SIGTERM: a clean shutdown). The deployer's engines
are its children and die with it (parent-death signal).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from evertune.deployer import DeployerService
from evertune.infra.logging import configure_logging
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.profiler import ProfilerService, ProfilerSettings
from tests.reliability.loop import deployer_settings


async def main(args: argparse.Namespace) -> None:
    configure_logging("console", "info")
    shared = load_settings(SharedSettings, clickhouse_url=args.store, data_dir=args.data_dir)
    deployer = DeployerService(deployer_settings(args.data_dir))
    profiler = ProfilerService(
        ProfilerSettings(schedule_interval_s=0, sink_flush_ms=50.0, sink_ack_wait_s=2.0)
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    def ready(_: object) -> None:
        print(json.dumps({"grpc": deployer.server.address, "pid": os.getpid()}), flush=True)

    await host_services(
        [profiler, deployer], shared=shared, nats_url=args.nats, stop=stop, on_ready=ready,
        client_name="reliability-deployer",
    )  # fmt: skip


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nats", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
