"""`evertune slo status` against a real sla-monitor on the session's NATS (in this process; `--watch`
until Ctrl-C as a subprocess), its one-line errors, and `evertune events tail`'s drift.detected line."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import time
import uuid

import numpy as np
from nats.aio.client import Client
from nats.js import JetStreamContext
from rich.console import Console

from evertune.apps.cli.events import format_event
from evertune.apps.cli.slo import rows_from_status, slo_table
from evertune.infra.bus import publish
from evertune.infra.events import EventKind, new_event
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime import ServiceContext
from evertune.infra.runtime.micro import InstanceStatus, register
from evertune.infra.settings import SharedSettings, load_settings
from evertune.sla_monitor import SlaMonitorService, SlaMonitorSettings
from evertune.sla_monitor.burn_rate import BurnRateRule
from evertune.v1 import events_pb2, telemetry_pb2
from tests.apps.cli.helpers import assert_one_line_error, run_cli, start_evertune


def _status() -> InstanceStatus:
    burn = {"page-fast": {"long": 8.5, "short": 9.0, "threshold": 2.0, "open": True}}
    details = {
        "window_s": 300.0,
        "endpoints": {
            "voice": {
                "requests": 40,
                "attainment": 0.5,
                "ttft_p50_ms": 410.0,
                "ttft_p99_ms": 820.4,
                "burn_rates": burn,
                "slo": {"ttft_p99_ms": 500.0, "attainment_target": 0.9, "source": "endpoints"},
                "deployments": {"dep-a": {"requests": 40, "attainment": 0.5, "ttft_p99_ms": 820.0}},
            }
        },
    }
    return InstanceStatus("sla-monitor", "id", "v", "", "running", "1", details)


def test_rows_and_table() -> None:
    rows = rows_from_status([_status()])
    assert [(r.endpoint, r.deployment) for r in rows] == [("voice", ""), ("voice", "dep-a")]
    assert rows[0].ttft_target_ms == 500.0 and rows[1].ttft_target_ms == 500.0
    console = Console(file=io.StringIO(), width=200)  # not a terminal: plain text
    console.print(slo_table(rows))
    table = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert table[0].split() == [
        "ENDPOINT",
        "DEPLOYMENT",
        "REQS",
        "P50_MS",
        "P99_MS",
        "TARGET_MS",
        "ATTAIN",
        "TARGET",
        "page-fast",
    ]
    assert table[1].split() == ["voice", "-", "40", "410", "820", "500", "0.500", "0.900", "8.50/9.00!"]
    assert table[2].split() == ["voice", "dep-a", "40", "-", "820", "500", "0.500", "0.900", "-"]
    assert rows_from_status([_status()], "other") == []


async def test_slo_status_reads_the_running_monitor(
    nats_server: EmbeddedNats, nc: Client, js: JetStreamContext
) -> None:
    endpoint = f"ep-{uuid.uuid4().hex[:10]}"
    settings = load_settings(
        SlaMonitorSettings,
        durable=f"sla-cli-{uuid.uuid4().hex[:10]}",
        subject=f"evertune.telemetry.{endpoint}",
        evaluate_interval_s=0.1,
        slot_s=0.5,
        rules=[BurnRateRule(name="page-fast", long_window_s=4, short_window_s=1, burn_rate=2.0)],
        ttft_p99_ms=300.0,
        metrics_port=-1,
        drift=False,
    )
    service = SlaMonitorService(settings)
    await service.start(ServiceContext(shared=load_settings(SharedSettings), nc=nc, js=js, store=None))
    micro = await register(nc, service)
    try:
        rng = np.random.default_rng(3)
        now_ns = time.time_ns()
        records = [
            telemetry_pb2.RequestRecord(
                request_id=uuid.uuid4().hex,
                endpoint=endpoint,
                deployment="dep-a",
                start_time_unix_ns=now_ns - 500_000_000,
                status_code=200,
                ttft_ms=float(rng.lognormal(np.log(100), 0.2)),
                e2e_ms=400.0,
            )
            for _ in range(50)
        ]
        batch = telemetry_pb2.RequestRecordBatch(records=records, batch_id=uuid.uuid4().hex, source="t")
        await publish(js, f"evertune.telemetry.{endpoint}", batch, msg_id=batch.batch_id)
        for _ in range(100):
            if service.monitor.counters.records >= 50:
                break
            await asyncio.sleep(0.05)
        args = ("slo", "status", "--nats-url", nats_server.url, "--endpoint", endpoint)
        done = await asyncio.to_thread(run_cli, *args, "--json")
        assert done.returncode == 0, done.stderr
        [row, dep] = json.loads(done.stdout.strip().splitlines()[-1])["rows"]
        assert (row["endpoint"], row["deployment"], dep["deployment"]) == (endpoint, "", "dep-a")
        assert row["requests"] == 50 and row["attainment"] == 1.0 and row["ttft_target_ms"] == 300.0
        assert 60 < row["ttft_p50_ms"] < 160 and row["slo_source"] == "default"
        assert row["burn_rates"]["page-fast"]["long"] == 0.0
        table = await asyncio.to_thread(run_cli, *args)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.strip().splitlines()
        assert (
            lines[1].split()[:3] == ["ENDPOINT", "DEPLOYMENT", "REQS"] and lines[1].split()[-1] == "page-fast"
        )
        assert lines[2].split()[:3] == [endpoint, "-", "50"] and lines[2].split()[-1] == "0.00/0.00"
        # --watch refreshes until interrupted
        watcher = start_evertune(*args, "--json", "--watch", "0.2")
        try:
            assert watcher.stdout is not None
            first = await asyncio.to_thread(watcher.stdout.readline)
            second = await asyncio.to_thread(watcher.stdout.readline)
            assert json.loads(first)["time"] < json.loads(second)["time"]
            watcher.send_signal(signal.SIGINT)
            assert await asyncio.to_thread(watcher.wait, 10) == 0
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.wait()
        # an endpoint the monitor has not seen is a one-line NOT_FOUND
        missing = await asyncio.to_thread(
            run_cli, "slo", "status", "--nats-url", nats_server.url, "--endpoint", "nope"
        )
        assert_one_line_error(missing, "the sla-monitor has seen no traffic for endpoint 'nope'")
    finally:
        await micro.stop()
        await service.stop(5.0)
        await js.delete_consumer("TELEMETRY", settings.durable)
    # nothing answers now: one line, non-zero
    gone = await asyncio.to_thread(run_cli, "slo", "status", "--nats-url", nats_server.url, "--wait", "0.3")
    assert_one_line_error(gone, f"no sla-monitor answered on {nats_server.url} within 0.3 s")


def test_slo_status_bad_input_and_no_nats_are_one_line(closed_port: int) -> None:
    bad = run_cli("slo", "status", "--nats-url", f"nats://127.0.0.1:{closed_port}", "--watch", "0")
    assert_one_line_error(bad, "--watch must be > 0 seconds, got 0")
    down = run_cli("slo", "status", "--nats-url", f"nats://127.0.0.1:{closed_port}")
    assert_one_line_error(down, "cannot reach NATS")


def test_events_tail_prints_drift_readably() -> None:
    signal = events_pb2.DriftSignal(
        feature="prompt_tokens",
        statistic="ks",
        score=0.31,
        threshold=0.06,
        reference_value=800,
        current_value=1120,
        measure="median",
        relative_change=0.4,
        p_value=1e-12,
        p_value_threshold=0.001,
    )
    drift = events_pb2.DriftDetected(reference_profile_id="prof-7", signals=[signal])
    drift.reference_window.FromSeconds(600)
    event = new_event(EventKind.DRIFT_DETECTED, endpoint="voice", source="sla-monitor", payload_message=drift)
    line = format_event(event)
    assert "drift.detected" in line and "voice" in line
    assert "prompt_tokens median 800 tok -> 1120 tok (+40%) by ks D=0.31 (> 0.06) p=1e-12" in line
    assert line.endswith("| reference: profile prof-7 (600 s)")
