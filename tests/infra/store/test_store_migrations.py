"""Migrations: applied once, in order, recorded with checksums; an edited applied file is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evertune.infra.store import MIGRATIONS_DIR, MigrationError, Store, load_migrations, migrate
from evertune.infra.store.migrations import split_statements


async def tables(store: Store) -> list[tuple[object, ...]]:
    return list(
        await store.query(
            "SELECT name, engine FROM system.tables WHERE database = {db:String} ORDER BY name",
            {"db": store.database},
        )
    )


async def test_shipped_migrations_apply_once(store: Store) -> None:
    names = [m.name for m in load_migrations()]
    assert names[0] == "0001_requests"
    assert await migrate(store) == names
    before = await tables(store)
    assert ("requests", "MergeTree") in before
    recorded = await store.query("SELECT version, name, checksum FROM schema_migrations ORDER BY version")
    assert [r[1] for r in recorded] == names
    assert all(len(r[2]) == 64 for r in recorded)

    assert await migrate(store) == []
    assert await tables(store) == before
    assert int((await store.query("SELECT count() FROM schema_migrations")).scalar()) == len(names)


async def test_requests_table_shape(store: Store) -> None:
    await migrate(store)
    columns = dict(
        (name, kind)
        for name, kind in await store.query(
            "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = 'requests'",
            {"db": store.database},
        )
    )
    assert columns["ts"] == "DateTime64(6, 'UTC')"
    assert columns["itl_ms"] == "Array(Float32)"
    assert columns["prefix_hashes"] == "Array(UInt64)"
    assert columns["endpoint"] == "LowCardinality(String)"
    assert not {"prompt", "completion", "text", "messages"} & set(columns)
    ddl = str((await store.query("SHOW CREATE TABLE requests")).scalar())
    assert "non_replicated_deduplication_window = 1000" in ddl
    assert "TTL toDateTime(ts) + toIntervalDay(30)" in ddl


def write(folder: Path, name: str, sql: str) -> Path:
    path = folder / name
    path.write_text(sql)
    return path


async def test_several_statements_in_order_and_new_files(store: Store, tmp_path: Path) -> None:
    write(
        tmp_path,
        "0001_first.sql",
        "-- a comment; with a semicolon\n"
        "CREATE TABLE IF NOT EXISTS {database}.a (x UInt8, s String DEFAULT 'x;y') "
        "ENGINE = MergeTree ORDER BY x;\n"
        "/* block; comment */\n"
        "INSERT INTO {database}.a (x) VALUES (1);\n",
    )
    assert await migrate(store, tmp_path) == ["0001_first"]
    assert await store.query("SELECT x, s FROM a") == [(1, "x;y")]
    write(tmp_path, "0003_third.sql", "ALTER TABLE {database}.a ADD COLUMN IF NOT EXISTS z UInt8 DEFAULT 3;")
    write(tmp_path, "0002_second.sql", "INSERT INTO {database}.a (x) VALUES (2)")
    assert await migrate(store, tmp_path) == ["0002_second", "0003_third"]
    assert await store.query("SELECT x, z FROM a ORDER BY x") == [(1, 3), (2, 3)]
    assert await migrate(store, tmp_path) == []


async def test_changed_checksum_is_refused(store: Store, tmp_path: Path) -> None:
    shutil.copytree(MIGRATIONS_DIR, tmp_path, dirs_exist_ok=True)
    await migrate(store, tmp_path)
    path = tmp_path / "0001_requests.sql"
    path.write_text(path.read_text() + "\n-- edited\n")
    with pytest.raises(MigrationError) as err:
        await migrate(store, tmp_path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text and "changed" in text


async def test_renamed_applied_migration_is_refused(store: Store, tmp_path: Path) -> None:
    write(tmp_path, "0001_one.sql", "SELECT 1")
    await migrate(store, tmp_path)
    (tmp_path / "0001_one.sql").rename(tmp_path / "0001_uno.sql")
    with pytest.raises(MigrationError, match=r"0001_uno\.sql"):
        await migrate(store, tmp_path)


def test_bad_file_names(tmp_path: Path) -> None:
    write(tmp_path, "1_short.sql", "SELECT 1")
    with pytest.raises(MigrationError, match=r"1_short\.sql"):
        load_migrations(tmp_path)
    (tmp_path / "1_short.sql").unlink()
    write(tmp_path, "0001_a.sql", "SELECT 1")
    write(tmp_path, "0001_b.sql", "SELECT 1")
    with pytest.raises(MigrationError, match="share a version"):
        load_migrations(tmp_path)
    with pytest.raises(MigrationError, match="does not exist"):
        load_migrations(tmp_path / "missing")


def test_split_statements() -> None:
    sql = """
    -- header; not a statement
    CREATE TABLE t (s String DEFAULT 'a;b', `c;d` UInt8) ENGINE = Memory;
    /* ; */ INSERT INTO t VALUES ('it\\'s;', 1)
    ;
    ;
    SELECT "x;y" -- trailing; comment
    """
    assert split_statements(sql) == [
        "CREATE TABLE t (s String DEFAULT 'a;b', `c;d` UInt8) ENGINE = Memory",
        "INSERT INTO t VALUES ('it\\'s;', 1)",
        'SELECT "x;y"',
    ]
    assert split_statements("-- only a comment\n") == []
