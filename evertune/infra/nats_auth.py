"""NATS users: one per service, scoped by the permissions table (`evertune.infra.bus.permissions`),
and an admin user for the command line and operators.

`generate(folder)` writes `auth.conf` (mode 0600) under the embedded server's folder with fresh
random passwords on every start; the server reads it with `--config`. The admin's credentials
reach the CLI through the data dir's `runtime.json` (mode 0600), in its NATS URL.

`write_cluster_credentials(folder)` (`evertune nats credentials`) writes the same users for a NATS
cluster as files the Kubernetes overlay's secretGenerator reads: the server's authorization include
(`CLUSTER_AUTHORIZATION`) and one password file per user (`password_file(user)`), each mode 0600.
Passwords are plain text in the include (nats-server also takes bcrypt hashes; evertune has no
bcrypt, and the include is a Secret beside the services' passwords: docs/security.md, "NATS").
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from evertune.errors import InvalidArgument
from evertune.infra.bus.permissions import SERVICES, Permissions, permissions_for
from evertune.infra.settings import NatsAuth

#: The file `generate` writes, under the embedded server's folder.
AUTH_CONFIG = "auth.conf"
#: The admin user: no permission limits (the CLI's `status`, `events tail`, the demo).
ADMIN_USER = "admin"
#: Every user, in the order the authorization block lists them.
USERS: tuple[str, ...] = (ADMIN_USER, *SERVICES)
#: The server's authorization include `write_cluster_credentials` writes.
CLUSTER_AUTHORIZATION = "nats-authorization.conf"
#: Its first lines (the rest is `authorization_block`).
CLUSTER_HEADER = (
    "# evertune's NATS users, written by `evertune nats credentials` (docs/operations.md): do not edit.\n"
    "# Permissions: evertune/infra/bus/permissions.py; run the command again when that table changes.\n"
)
_PASSWORD = re.compile(r"[!-~]+")  # printable ASCII, no space: nothing a Secret or env var mangles


@dataclass(frozen=True)
class EmbeddedCredentials:
    """What `generate` wrote: the config file and every user's credentials."""

    config_file: Path
    admin: NatsAuth = field(repr=False)
    services: dict[str, NatsAuth] = field(repr=False)

    def admin_url(self, url: str) -> str:
        """`url` with the admin's user and password in it (`nats://admin:pw@127.0.0.1:port`)."""
        split = urlsplit(url)
        netloc = f"{self.admin.user}:{self.admin.password}@{split.netloc.rsplit('@', 1)[-1]}"
        return urlunsplit(split._replace(netloc=netloc))


def _user(name: str, password: str, permissions: Permissions | None) -> str:
    entry = f"    {{user: {json.dumps(name)}, password: {json.dumps(password)}"
    if permissions is None:
        return entry + "}"
    publish, subscribe = json.dumps(list(permissions.publish)), json.dumps(list(permissions.subscribe))
    return entry + f", permissions: {{publish: {{allow: {publish}}}, subscribe: {{allow: {subscribe}}}}}}}"


def authorization_block(passwords: dict[str, str]) -> str:
    """A nats-server `authorization` block: `passwords` maps user to password; `ADMIN_USER`
    unrestricted, each service's user as the permissions table says."""
    users = [
        _user(name, password, None if name == ADMIN_USER else permissions_for(name))
        for name, password in passwords.items()
    ]
    return "authorization {\n  users = [\n" + "\n".join(users) + "\n  ]\n}\n"


def generate(folder: Path) -> EmbeddedCredentials:
    """Fresh passwords for the admin and every service, written to `folder/auth.conf` (0600)."""
    folder.mkdir(parents=True, exist_ok=True)
    passwords = {name: secrets.token_urlsafe(24) for name in (ADMIN_USER, *SERVICES)}
    path = folder / AUTH_CONFIG
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write("# Written by `evertune up` at each start; do not edit.\n")
        handle.write(authorization_block(passwords))
    return EmbeddedCredentials(
        config_file=path,
        admin=NatsAuth(user=ADMIN_USER, password=passwords[ADMIN_USER]),
        services={name: NatsAuth(user=name, password=passwords[name]) for name in SERVICES},
    )


def password_file(user: str) -> str:
    """The file `write_cluster_credentials` keeps `user`'s password in (no newline at its end)."""
    return f"nats-{user}.password"


def cluster_authorization(passwords: dict[str, str]) -> str:
    """The text of `CLUSTER_AUTHORIZATION` for these passwords (user to password, `USERS` order)."""
    return CLUSTER_HEADER + authorization_block({user: passwords[user] for user in USERS})


@dataclass(frozen=True)
class ClusterCredentials:
    """What `write_cluster_credentials` did: the include it wrote, and whose password it made."""

    authorization_file: Path
    created: tuple[str, ...]  #: users given a new password
    kept: tuple[str, ...]  #: users whose password file was there and is kept


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path` (mode 0600) through a new file renamed over it: never half-written."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _kept_password(path: Path, user: str) -> str:
    password = path.read_text()
    if not _PASSWORD.fullmatch(password):
        raise InvalidArgument(
            f"{path} is not a password this command can keep (empty, or a space or newline in it:"
            f" the Secret would carry it too): give {user} a new one with --rotate {user}"
        )
    return password


def write_cluster_credentials(folder: Path, *, rotate: Iterable[str] = ()) -> ClusterCredentials:
    """Write a NATS cluster's users into `folder` (created, mode 0700): a password file per user
    and the server's authorization include, all mode 0600. A user's password file already there is
    kept unless `rotate` names the user (or `all`); the include is written anew every time, so a run
    after the permissions table changed updates it. Passwords are never printed or logged."""
    rotate = set(rotate)
    if unknown := sorted(rotate - {*USERS, "all"}):
        raise InvalidArgument(
            f"--rotate {', '.join(unknown)}: not a NATS user (users: all, {', '.join(USERS)})"
        )
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    passwords: dict[str, str] = {}
    created, kept = [], []
    for user in USERS:
        path = folder / password_file(user)
        if path.exists() and user not in rotate and "all" not in rotate:
            passwords[user] = _kept_password(path, user)
            path.chmod(0o600)
            kept.append(user)
        else:
            passwords[user] = secrets.token_urlsafe(32)
            created.append(user)
    for user in created:
        _write_private(folder / password_file(user), passwords[user])
    authorization = folder / CLUSTER_AUTHORIZATION
    _write_private(authorization, cluster_authorization(passwords))
    return ClusterCredentials(authorization, tuple(created), tuple(kept))
