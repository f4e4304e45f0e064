"""The `evertune` command. One entry point; every command has `--help`.

Errors evertune raises on purpose print as one line (`evertune: <message>`) with a non-zero exit
code; nothing else is caught here, so a real bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from evertune.errors import EvertuneError


def _data_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory (default: $EVERTUNE_DATA_DIR or ~/.evertune)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evertune",
        description="Keeps self-hosted vLLM endpoints tuned for voice-agent time to first token.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="start NATS, the store and every service in one process")
    _data_dir_arg(up)
    up.add_argument("--duration", type=float, default=None, help="stop by itself after this many seconds")
    up.add_argument("--demo", action="store_true", help="run the demo (what `make demo` runs)")

    status = commands.add_parser("status", help="list running services and their state")
    _data_dir_arg(status)
    status.add_argument("--nats-url", default=None, help="ask this NATS instead of the data dir's")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--wait", type=float, default=1.0, help="seconds to wait for answers (default 1)")

    run = commands.add_parser("run", help="run one service alone against the NATS and ClickHouse in settings")
    run.add_argument("service", help="gateway, profiler, sla-monitor, searcher, runner or deployer")

    events = commands.add_parser("events", help="the event stream")
    events_commands = events.add_subparsers(dest="events_command", required=True, metavar="COMMAND")
    tail = events_commands.add_parser("tail", help="print events as they happen")
    _data_dir_arg(tail)
    tail.add_argument("--nats-url", default=None, help="read this NATS instead of the data dir's")
    tail.add_argument("--endpoint", default=None, help="only events of this endpoint")
    tail.add_argument("--kind", default=None, help="only events of this kind, e.g. sla.breach")
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    tail.add_argument("--all", action="store_true", help="start from the oldest stored event, not from now")
    tail.add_argument("--count", type=int, default=None, help="stop after this many events")

    bench = commands.add_parser("bench", help="run a benchmark; with --json the last line is one JSON object")
    bench.add_argument("name", help="benchmark name (`evertune bench list` lists them)")
    bench.add_argument("--quick", action="store_true", help="a short run, for smoke checks")
    bench.add_argument("--json", action="store_true", help="end with one line of JSON figures")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "up":
            from evertune.cli.up import up

            return up(data_dir=args.data_dir, duration_s=args.duration, demo=args.demo)
        if args.command == "status":
            from evertune.cli.status import status

            return status(data_dir=args.data_dir, nats_url=args.nats_url, as_json=args.json, wait_s=args.wait)
        if args.command == "run":
            from evertune.cli.run import run

            return run(args.service)
        if args.command == "events":
            from evertune.cli.events import tail

            return tail(
                data_dir=args.data_dir,
                nats_url=args.nats_url,
                endpoint=args.endpoint,
                kind=args.kind,
                as_json=args.json,
                from_start=args.all,
                count=args.count,
            )
        if args.command == "bench":
            from evertune.cli.bench import bench

            return bench(args.name, quick=args.quick, as_json=args.json)
    except EvertuneError as err:
        print(f"evertune: {err}", file=sys.stderr)
        return err.exit_code
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
