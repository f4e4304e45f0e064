"""The telemetry sink killed (SIGKILL) after its ClickHouse insert and before its ack: after the
redelivery, no row is stored twice.

The sink runs in a process of its own (`sink_process.py`) on a chDB folder of this test's own (the
test process never opens it: chDB allows one process per folder), against the session's nats-server.
The first process dies the moment its insert returns; the server still holds every message unacked
and redelivers them after the ack wait to a second process (a fresh sink, no memory of the first),
which must store the records that were missing and none twice.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from nats.js import JetStreamContext

from evertune.infra.bus import publish
from evertune.infra.nats_server import EmbeddedNats
from tests import checkout
from tests.profiler.helpers import batch

pytestmark = pytest.mark.reliability

FIRST = 8  #: batches published before the crash (taken and inserted by the first process)
RECORDS = 50  #: records per batch
REPO = checkout.ROOT  #: where `python -m tests.reliability...` runs


async def _sink_process(mode: str, *args: str) -> tuple[int, list[dict[str, Any]]]:
    """Run the sink in its own process; its exit code and the JSON lines it printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.reliability.sink_process",
        "--mode",
        mode,
        *args,
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert process.returncode is not None
    return process.returncode, lines


@pytest.mark.parametrize("later", [0, 4], ids=["same-group", "regrouped"])
async def test_sink_killed_between_insert_and_ack_stores_no_duplicate(
    nats_server: EmbeddedNats, js: JetStreamContext, tmp_path: Path, later: int
) -> None:
    """`same-group`: the redelivered messages come back as the same group, under the same insert
    dedup token, which ClickHouse drops by itself. `regrouped`: new messages join them, the group and
    its token differ, and only the sink's check of redelivered rows against the table keeps them out."""
    name = uuid.uuid4().hex[:10]
    subject, durable = f"evertune.telemetry.kill-{name}", f"kill-{name}"
    common = [
        "--nats",
        nats_server.url,
        "--store",
        f"chdb://{(tmp_path / 'clickhouse').resolve()}",
        "--database",
        "reliability",
        "--subject",
        subject,
        "--durable",
        durable,
    ]
    first = [batch(i * RECORDS, RECORDS) for i in range(FIRST)]
    for b in first:
        await publish(js, subject, b, msg_id=b.batch_id)
    try:
        code, lines = await _sink_process("die", *common)
        assert code == -signal.SIGKILL, lines  # it died by the kill, not by an error
        assert lines == [{"inserted_rows": FIRST * RECORDS}]  # every row was written before it died
        info = await js.consumer_info("TELEMETRY", durable)
        assert info.num_ack_pending == FIRST  # and nothing was acked

        for b in [batch((FIRST + i) * RECORDS, RECORDS) for i in range(later)]:
            await publish(js, subject, b, msg_id=b.batch_id)
        code, lines = await _sink_process("finish", *common, "--expect-messages", str(FIRST + later))
        assert code == 0, lines
        [result] = lines
        print(
            f"\nsink-killed[{later}]: records={(FIRST + later) * RECORDS} rows={result['rows']}"
            f" stats={result['stats']}"
        )
        # The crash's messages came back (all acked now, unacked before) and were stored once.
        assert result["rows"] == result["distinct"] == (FIRST + later) * RECORDS
    finally:
        await js.delete_consumer("TELEMETRY", durable)
