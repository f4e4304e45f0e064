"""The store against a real engine: queries, idempotent inserts, and the errors of open_store."""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evertune.errors import InvalidArgument, StoreUnavailable
from evertune.infra.store import Store, StoreError, chdb_folder_in_use, migrate, open_store
from evertune.profiler.sink import COLUMNS

#: A whole hour of yesterday: the requests table keeps 30 days (TTL), so a fixed date would expire.
T0 = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0) - dt.timedelta(days=1)


def request_rows(n: int, endpoint: str = "voice", start: int = 0) -> list[list[object]]:
    rows = []
    for i in range(start, start + n):
        row: dict[str, object] = {
            "endpoint": endpoint,
            "endpoint_uid": f"ep-{endpoint}",
            "deployment": "d1",
            "request_id": f"req-{i}",
            "ts": T0 + dt.timedelta(milliseconds=10 * i),
            "api": "chat.completions",
            "model": "tiny-llama",
            "stream": True,
            "status_code": 200,
            "error_class": "",
            "ttft_ms": 80.0 + i % 40,
            "e2e_ms": 600.0,
            "upstream_ttft_ms": 75.0,
            "itl_ms": [12.5] * 20,
            "prompt_tokens": 1500,
            "cached_tokens": 1024,
            "completion_tokens": 24,
            "prefix_hashes": [2**63 + i, 7],
            "client_disconnected": False,
        }
        rows.append([row[name] for name in COLUMNS])
    return rows


def chdb_only(store: Store) -> None:
    if not store.embedded:
        pytest.skip("chDB-specific behaviour")


def assert_one_line(err: BaseException) -> str:
    text = str(err)
    assert text and "\n" not in text, text
    return text


async def count(store: Store, table: str = "requests") -> int:
    return int((await store.query(f"SELECT count() FROM {table}")).scalar())


async def test_query_with_parameters(store: Store) -> None:
    await migrate(store)
    await store.insert(
        "requests", request_rows(30, "voice") + request_rows(5, "chat"), COLUMNS, dedup_token="p"
    )
    result = await store.query(
        "SELECT endpoint, count() AS n, max(ttft_ms) AS worst FROM requests "
        "WHERE endpoint = {endpoint:String} AND ts >= {since:DateTime64(6, 'UTC')} GROUP BY endpoint",
        {"endpoint": "voice", "since": T0 + dt.timedelta(milliseconds=100)},
    )
    assert result == [("voice", 20, 109.0)]
    assert result.column_names == ("endpoint", "n", "worst")
    assert result.dicts() == [{"endpoint": "voice", "n": 20, "worst": 109.0}]
    row = (await store.query("SELECT ts, itl_ms, prefix_hashes FROM requests WHERE request_id = 'req-3'"))[0]
    assert row[0] == T0 + dt.timedelta(milliseconds=30)  # DateTime64('UTC') comes back aware
    assert row[1] == [12.5] * 20 and row[2] == [2**63 + 3, 7]
    assert await store.query("SELECT 1 WHERE 0") == []


async def test_insert_retried_with_same_token_lands_once(store: Store) -> None:
    await migrate(store)
    rows = request_rows(1000)
    for _ in range(3):  # a retried batch: same rows, same token
        await store.insert("requests", rows, COLUMNS, dedup_token="batch-1")
    assert await count(store) == 1000
    await store.insert("requests", rows, COLUMNS, dedup_token="batch-2")  # same rows, new batch
    assert await count(store) == 2000
    await store.insert("requests", [], COLUMNS, dedup_token="batch-3")  # nothing to do
    assert await count(store) == 2000
    with pytest.raises(InvalidArgument):
        await store.insert("requests", rows, COLUMNS, dedup_token="")


async def test_statement_errors_are_one_line(store: Store) -> None:
    with pytest.raises(StoreError) as err:
        await store.query("SELECT * FROM no_such_table")
    assert "UNKNOWN_TABLE" in assert_one_line(err.value)
    with pytest.raises(StoreError) as err:
        await store.command("CREATE TABLE broken (")
    assert_one_line(err.value)
    assert await store.query("SELECT 1") == [(1,)]  # the store still works


async def test_stores_on_one_folder_share_the_engine(store: Store, store_url: str) -> None:
    chdb_only(store)
    other = await open_store(store_url, database=store.database)
    try:
        await other.command("CREATE TABLE t (x UInt8) ENGINE = MergeTree ORDER BY x")
        await other.insert("t", [[1], [2]], ["x"], dedup_token="t1")
        # Both stores' calls run concurrently from the loop; the engine sees them one at a time.
        results = await asyncio.gather(*(s.query("SELECT sum(x) FROM t") for s in [store, other] * 10))
        assert all(r == [(3,)] for r in results)
    finally:
        await other.close()
    assert other.closed
    assert await count(store, "t") == 2  # closing one store leaves the engine to the others
    with pytest.raises(StoreUnavailable, match="closed"):
        await other.query("SELECT 1")
    await other.close()  # idempotent


async def test_bad_url_scheme(store_engine: Store) -> None:
    for url in ["ftp://host/x", "", "/var/lib/clickhouse", "chdb://relative/folder", "http://"]:
        with pytest.raises(StoreUnavailable) as err:
            await open_store(url, database="evertune")
        assert_one_line(err.value)
    with pytest.raises(StoreUnavailable, match="ftp://user:\\*\\*\\*@host"):
        await open_store("ftp://user:secret@host/", database="evertune")
    with pytest.raises(StoreUnavailable, match="database name"):
        await open_store(store_engine.url, database="bad-name; DROP")


async def test_unreachable_server_fails_fast() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as err:
        await open_store(f"http://evertune:s3cret@127.0.0.1:{port}/", database="evertune")
    assert time.monotonic() - started < 5
    text = assert_one_line(err.value)
    assert f"127.0.0.1:{port}" in text and "unreachable" in text and "s3cret" not in text


async def test_second_chdb_folder_in_this_process_is_refused(store_engine: Store, tmp_path: Path) -> None:
    chdb_only(store_engine)
    folder = tmp_path / "other"
    with pytest.raises(StoreUnavailable) as err:
        await open_store(f"chdb://{folder}", database="evertune")
    text = assert_one_line(err.value)
    assert str(folder) in text and "one folder per process" in text
    assert await store_engine.query("SELECT 1") == [(1,)]  # the open engine is untouched


HOLDER = textwrap.dedent(
    """
    import sys, clickhouse_connect
    client = clickhouse_connect.get_client(interface="chdb", path=sys.argv[1])
    print("ready", flush=True)
    sys.stdin.read()
    """
)


async def test_chdb_folder_held_by_another_process(store_engine: Store, tmp_path: Path) -> None:
    chdb_only(store_engine)
    folder = str((tmp_path / "held").resolve())
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, folder,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        assert await asyncio.wait_for(child.stdout.readline(), 60) == b"ready\n"
        assert chdb_folder_in_use(folder)
        with pytest.raises(StoreUnavailable) as err:
            await open_store(f"chdb://{folder}", database="evertune")
        text = assert_one_line(err.value)
        assert folder in text and "in use by another process" in text
    finally:
        child.kill()
        await child.wait()


LIFECYCLE = textwrap.dedent(
    """
    import asyncio, sys
    from evertune.errors import StoreUnavailable
    from evertune.infra.store import chdb_folder_in_use, open_store

    async def main(a, b):
        one = await open_store(f"chdb://{a}", database="x")
        two = await open_store(f"chdb://{a}", database="y")
        await one.close()
        assert await two.query("SELECT 1") == [(1,)]
        assert chdb_folder_in_use(a)
        try:
            await open_store(f"chdb://{b}", database="x")
            raise AssertionError("a second folder opened")
        except StoreUnavailable:
            pass
        await two.close()  # the last store on a closes the engine
        assert not chdb_folder_in_use(a)
        three = await open_store(f"chdb://{b}", database="x")
        assert await three.query("SELECT currentDatabase()") == [("x",)]
        await three.close()
        print("ok")

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_last_close_releases_the_engine(tmp_path: Path) -> None:
    # Needs a process without an engine open: run it in a child.
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LIFECYCLE, str(tmp_path / "a"), str(tmp_path / "b"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(child.communicate(), 60)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert child.returncode == 0 and out.decode().strip().endswith("ok"), out.decode()
