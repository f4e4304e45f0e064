"""The telemetry store: ClickHouse through clickhouse-connect, embedded chDB by default.

    store = await open_store(settings.store_url, database=settings.clickhouse_database)
    await migrate(store)
    await store.insert("requests", rows, column_names, dedup_token=batch_id)
    rows = await store.query("SELECT count() FROM requests WHERE endpoint = {e:String}", {"e": name})
    await store.close()

See docs/store.md.
"""

from evertune.infra.store.client import QueryResult, Store, StoreError, chdb_folder_in_use, open_store
from evertune.infra.store.migrations import (
    MIGRATIONS_DIR,
    Migration,
    MigrationError,
    load_migrations,
    migrate,
)

__all__ = [
    "MIGRATIONS_DIR",
    "Migration",
    "MigrationError",
    "QueryResult",
    "Store",
    "StoreError",
    "chdb_folder_in_use",
    "load_migrations",
    "migrate",
    "open_store",
]
