"""A runner in a process of its own on the sim engine, for the runner-kill test (run with `python -m`).

    python -m tests.reliability.runner_process --nats URL --store chdb:///dir --hardware sim-cpu \
        --model-dir DIR --ack-wait-s S

Prints `ready` once it takes jobs, then runs until it is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from evertune.infra.logging import configure_logging
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.runner import RunnerService, RunnerSettings


async def main(args: argparse.Namespace) -> None:
    configure_logging("json", "warning")
    shared = load_settings(SharedSettings, clickhouse_url=args.store, data_dir=args.model_dir.parent)
    service = RunnerService(
        runner_settings(args.hardware, ack_wait_s=args.ack_wait_s), model_dir=args.model_dir
    )
    await host_services(
        [service],
        shared=shared,
        nats_url=args.nats,
        stop=asyncio.Event(),
        on_ready=lambda _: print("ready", flush=True),
        client_name="reliability-runner",
    )


def runner_settings(hardware: str, *, ack_wait_s: float) -> RunnerSettings:
    """Runner settings of the loop tests: short heartbeats, small warm-up and golden set."""
    return load_settings(
        RunnerSettings,
        hardware=hardware,
        ack_wait_s=ack_wait_s,
        fetch_timeout_s=0.5,
        warmup_turns=1,
        golden_prompts=4,
        golden_max_tokens=8,
        request_timeout_s=20.0,
        engine_ready_timeout_s=30.0,
    )


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nats", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--hardware", required=True)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--ack-wait-s", type=float, default=3.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
