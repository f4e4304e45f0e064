"""`evertune run <service>`: one service alone, against the NATS and ClickHouse named in settings.

This is how production runs evertune: one process per service, `EVERTUNE_NATS_URL` pointing at a
NATS cluster and `EVERTUNE_CLICKHOUSE_URL` at a ClickHouse server.
"""

from __future__ import annotations

import argparse
import asyncio

from evertune.apps.cli.common import Commands, shared_settings, stop_on_signals
from evertune.apps.services import create_service
from evertune.errors import SettingsError
from evertune.infra.runtime.host import host_services


def add_commands(commands: Commands) -> None:
    """`evertune run <service>`."""
    parser = commands.add_parser(
        "run", help="run one service alone against the NATS and ClickHouse in settings"
    )
    parser.add_argument("service", help="gateway, profiler, sla-monitor, searcher, runner or deployer")
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    return run(args.service)


def run(name: str) -> int:
    shared = shared_settings(None)
    if not shared.nats_url:
        raise SettingsError("invalid setting EVERTUNE_NATS_URL: `evertune run` needs a NATS server to join")
    service = create_service(name)

    async def main() -> int:
        stop = asyncio.Event()
        stop_on_signals(stop)
        await host_services(
            [service], shared=shared, nats_url=shared.nats_url, stop=stop, client_name=f"evertune-{name}"
        )
        return 0

    with asyncio.Runner(loop_factory=service.loop_factory()) as runner:
        return runner.run(main())
