"""The `evertune` command. One entry point; every command has `--help`.

Errors evertune raises on purpose print as one line (`evertune: <message>`) with a non-zero exit
code; nothing else is caught here, so a real bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from evertune.apps.cli import (
    bench,
    endpoint,
    events,
    hardware,
    model,
    nats,
    profile,
    replay,
    run,
    search,
    slo,
    status,
    trial,
    up,
)
from evertune.errors import EvertuneError

#: The command modules, in the order `evertune --help` lists their commands. Each declares its
#: commands and their options in `add_commands`, with `set_defaults(func=...)` naming the function
#: that runs one from the parsed arguments; a module imports what is slow to import (torch) inside
#: that function, so `evertune --help` and the light commands start fast.
COMMAND_MODULES = (
    up,
    status,
    run,
    events,
    slo,
    replay,
    model,
    hardware,
    profile,
    endpoint,
    trial,
    search,
    nats,
    bench,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evertune",
        description="Keeps self-hosted vLLM endpoints tuned for voice-agent time to first token.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.func
    try:
        return command(args)
    except EvertuneError as err:
        print(f"evertune: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
