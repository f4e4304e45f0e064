"""`evertune nats credentials --out DIR`: the NATS users of a cluster, for the Kubernetes overlay.

Writes the server's authorization include (every service's user with its permissions, and the
admin) and one password file per user into DIR, each mode 0600, as files the production overlay's
secretGenerator reads (docs/operations.md, "NATS credentials and TLS"). A password already in DIR
is kept unless `--rotate` names its user; the include is rewritten every time. Prints which files
it wrote, never a password.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evertune.apps.cli.common import Commands
from evertune.infra.nats_auth import USERS, password_file, write_cluster_credentials


def add_commands(commands: Commands) -> None:
    """Register `nats` on the top-level subparsers."""
    nats = commands.add_parser("nats", help="a NATS cluster's users and passwords (Kubernetes)")
    nats.set_defaults(func=run)
    sub = nats.add_subparsers(dest="nats_command", required=True, metavar="COMMAND")
    credentials = sub.add_parser(
        "credentials",
        help="write the NATS server's users (an authorization include) and a password file per service",
    )
    credentials.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="folder to write (the overlay's secrets/ folder); created if missing",
    )
    credentials.add_argument(
        "--rotate",
        action="append",
        default=[],
        metavar="USER",
        help=f"give USER a new password (repeatable; one of all, {', '.join(USERS)}); others are kept",
    )


def run(args: argparse.Namespace) -> int:
    """Write the credentials; print what was written, never a password."""
    written = write_cluster_credentials(args.out, rotate=args.rotate)
    folder = written.authorization_file.parent
    print(f"wrote {written.authorization_file} (users {', '.join(USERS)}; mode 0600)")
    if written.created:
        files = ", ".join(password_file(u) for u in written.created)
        print(f"new passwords in {folder}: {files}")
    if written.kept:
        print(f"kept the passwords of {', '.join(written.kept)}")
    print(
        "next: kubectl apply -k the overlay, reload each NATS node (nats-server --signal reload),"
        " then restart the services whose password is new (docs/operations.md)"
    )
    return 0
