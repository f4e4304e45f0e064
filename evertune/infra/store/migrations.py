"""Schema migrations: numbered SQL files applied once each, in order, recorded in the database.

Files live in `infra/clickhouse/` and are named `NNNN_description.sql` (four digits, then lower
case letters, digits and `_`). A file may hold several statements separated by `;`. The text
`{database}` is replaced by the store's database before the statements run.

`migrate(store)` applies the files not yet recorded in `<database>.schema_migrations`, in version
order, and records each one (version, name, sha256 of the file, applied_at) after all its
statements succeeded. ClickHouse has no transactional DDL: a migration that fails half way is run
again from its first statement next time, so write statements that can run twice
(`CREATE TABLE IF NOT EXISTS`, `ADD COLUMN IF NOT EXISTS`). A recorded file must never change:
`migrate` refuses to run when a recorded checksum differs from the file's.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from evertune.errors import FailedPrecondition
from evertune.infra.package_data import INFRA

from .client import Store

__all__ = ["MIGRATIONS_DIR", "Migration", "MigrationError", "load_migrations", "migrate", "split_statements"]

#: The migrations shipped with evertune (package data: the repository's `infra/clickhouse`).
MIGRATIONS_DIR = INFRA / "clickhouse"

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_SCHEMA_MIGRATIONS = """
CREATE TABLE IF NOT EXISTS {database}.schema_migrations
(
    version UInt32,
    name String,
    checksum String,
    applied_at DateTime64(6, 'UTC')
)
ENGINE = ReplacingMergeTree(applied_at)
ORDER BY version
SETTINGS non_replicated_deduplication_window = 1000
"""


class MigrationError(FailedPrecondition):
    """The migration files and the database's record of them disagree, or a file is malformed."""


@dataclass(frozen=True)
class Migration:
    """One migration file."""

    version: int
    #: File name without `.sql`, e.g. `0001_requests`.
    name: str
    path: Path
    #: sha256 of the file's bytes, hex.
    checksum: str
    sql: str

    def statements(self, database: str) -> list[str]:
        """The file's statements, with `{database}` replaced."""
        return split_statements(self.sql.replace("{database}", database))


def load_migrations(directory: Path | None = None) -> list[Migration]:
    """The `NNNN_*.sql` files of `directory` (default `MIGRATIONS_DIR`), in version order."""
    folder = directory if directory is not None else MIGRATIONS_DIR
    if not folder.is_dir():
        raise MigrationError(f"migrations folder {folder} does not exist")
    found: dict[int, Migration] = {}
    for path in sorted(folder.glob("*.sql")):
        match = _FILE_NAME.match(path.name)
        if not match:
            raise MigrationError(
                f"migration file {path} is not named NNNN_description.sql (4 digits, then [a-z0-9_])"
            )
        data = path.read_bytes()
        try:
            sql = data.decode("utf-8")
        except UnicodeDecodeError:
            raise MigrationError(f"migration file {path} is not UTF-8") from None
        version = int(match.group(1))
        if version in found:
            raise MigrationError(
                f"migration files {found[version].path.name} and {path.name} share a version"
            )
        found[version] = Migration(version, path.stem, path, hashlib.sha256(data).hexdigest(), sql)
    return [found[v] for v in sorted(found)]


async def migrate(store: Store, directory: Path | None = None) -> list[str]:
    """Apply the migrations not yet applied to the store's database; return their names in order.

    Returns `[]` when everything was applied already. Raises `MigrationError` (one line, naming
    the file) when an applied migration's file has changed since, and `StoreError` when ClickHouse
    rejects a statement. Migrations recorded in the database but absent here (a newer evertune ran
    on this database) are left alone.
    """
    migrations = load_migrations(directory)
    database = store.database
    await store.command(_SCHEMA_MIGRATIONS.replace("{database}", database))
    recorded = {
        int(version): (str(name), str(checksum))
        for version, name, checksum in await store.query(
            f"SELECT version, argMax(name, applied_at), argMax(checksum, applied_at) "
            f"FROM {database}.schema_migrations GROUP BY version"
        )
    }
    for migration in migrations:
        seen = recorded.get(migration.version)
        if seen is None:
            continue
        name, checksum = seen
        if name != migration.name:
            raise MigrationError(
                f"migration {migration.version:04d} was applied as {name}.sql but the file is now "
                f"{migration.path}; applied migrations must not be renamed"
            )
        if checksum != migration.checksum:
            raise MigrationError(
                f"migration file {migration.path} changed after it was applied to database {database} "
                "(checksum differs); add a new migration instead of editing an applied one"
            )
    applied: list[str] = []
    for migration in migrations:
        if migration.version in recorded:
            continue
        for statement in migration.statements(database):
            await store.command(statement)
        await store.insert(
            f"{database}.schema_migrations",
            [[migration.version, migration.name, migration.checksum, datetime.now(UTC)]],
            ["version", "name", "checksum", "applied_at"],
            dedup_token=f"migration-{migration.version}-{migration.checksum}",
        )
        applied.append(migration.name)
    return applied


def split_statements(sql: str) -> list[str]:
    """Split SQL text into statements at `;`, ignoring `;` inside quotes and comments.

    Comments (`-- ...` and `/* ... */`) are dropped, and so are empty statements.
    """
    statements: list[str] = []
    current: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            end = i + 1
            while end < n and sql[end] != ch:
                end += 2 if sql[end] == "\\" else 1
            current.append(sql[i : end + 1])
            i = end + 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            current.append(" ")
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            current.append(" ")
        elif ch == ";":
            statements.append("".join(current))
            current = []
            i += 1
        else:
            current.append(ch)
            i += 1
    statements.append("".join(current))
    return [s.strip() for s in statements if s.strip()]
