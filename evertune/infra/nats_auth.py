"""Credentials for the embedded nats-server: one user per service, scoped by the permissions table
(`evertune.infra.bus.permissions`), and an admin user for the command line.

`generate(folder)` writes `auth.conf` (mode 0600) under the embedded server's folder with fresh
random passwords on every start; the server reads it with `--config`. The admin's credentials
reach the CLI through the data dir's `runtime.json` (mode 0600), in its NATS URL.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from evertune.infra.bus.permissions import SERVICES, Permissions, permissions_for
from evertune.infra.settings import NatsAuth

#: The file `generate` writes, under the embedded server's folder.
AUTH_CONFIG = "auth.conf"
#: The admin user: no permission limits (the CLI's `status`, `events tail`, the demo).
ADMIN_USER = "admin"


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
