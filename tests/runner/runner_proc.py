"""A runner in a process of its own, with the stand-in engine: the one the redelivery test kills.

    python runner_proc.py --nats-url URL --store-url chdb:///DIR --hardware H --model-dir D

Prints `ready` once it takes jobs. Its engines slow every token down (`--ttft-ms 30`), so a trial
lasts long enough to be killed in the middle.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evertune.infra.logging import configure_logging
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.runner import RunnerService
from tests.runner.helpers import fake_factory, settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nats-url", required=True)
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--hardware", required=True)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    configure_logging("json", "warning")
    shared = load_settings(SharedSettings, clickhouse_url=args.store_url, data_dir=args.model_dir)
    service = RunnerService(
        settings(hardware=args.hardware),
        engine_factory=fake_factory(lambda spec: ["--ttft-ms", "30"]),
        model_dir=args.model_dir,
    )

    async def run() -> None:
        stop = asyncio.Event()
        await host_services(
            [service],
            shared=shared,
            nats_url=args.nats_url,
            stop=stop,
            on_ready=lambda _: print("ready", flush=True),
        )

    asyncio.run(run())


if __name__ == "__main__":
    main()
