"""`evertune hardware show`: this machine's fingerprint, as a runner here reports it."""

from __future__ import annotations

import argparse
import json

from evertune.apps.cli.common import Commands
from evertune.domain.engines.fingerprint import detect


def add_commands(commands: Commands) -> None:
    """`evertune hardware show`."""
    hardware = commands.add_parser("hardware", help="what this machine is, as runners fingerprint it")
    hardware_commands = hardware.add_subparsers(dest="hardware_command", required=True, metavar="COMMAND")
    parser = hardware_commands.add_parser("show", help="print this machine's hardware fingerprint")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=show_command)


def show_command(args: argparse.Namespace) -> int:
    return show(as_json=args.json)


def show(*, as_json: bool) -> int:
    """Print the fingerprint (one JSON object with `--json`, else one line per field)."""
    fingerprint = detect()
    if as_json:
        print(json.dumps(fingerprint.as_dict(), sort_keys=True))
        return 0
    rows = [
        ("id", fingerprint.id),
        ("tier", fingerprint.tier),
        ("kind", fingerprint.kind),
        ("cpu", f"{fingerprint.model} ({fingerprint.machine})"),
        ("signature", fingerprint.signature or "not reported"),
        ("cores", str(fingerprint.cores)),
        ("memory", f"{fingerprint.memory_gib:.1f} GiB"),
        ("isa", " ".join(fingerprint.features) or "none of the tracked features"),
    ]
    rows += [
        (f"device {i}", f"{d.name}, compute {d.compute_capability}, {d.memory_gib:.0f} GiB")
        for i, d in enumerate(fingerprint.devices)
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0
