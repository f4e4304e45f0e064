"""`evertune run`, `events tail`, `bench` and their bad inputs; `python -m evertune` itself.

`run <service>` until a signal and the entry point run as subprocesses; the rest in this process."""

from __future__ import annotations

import asyncio
import json
import signal
import time

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.infra.bus import publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime.micro import discover
from evertune.v1 import events_pb2
from tests.apps.cli.helpers import assert_one_line_error, cli_env, evertune, run_cli, start_evertune


async def test_run_one_service_against_a_running_nats(nats_server: EmbeddedNats, nc: Client) -> None:
    env = cli_env(EVERTUNE_NATS_URL=nats_server.url, EVERTUNE_RUNNER_HARDWARE="cpu-test")
    proc = start_evertune("run", "runner", env=env)
    try:
        runner = None
        deadline = time.monotonic() + 60
        while runner is None and time.monotonic() < deadline:
            found = await discover(nc, wait_s=0.5)
            runner = next(
                (s for s in found if s.name == "runner" and s.details.get("hardware") == "cpu-test"), None
            )
        assert runner is not None and runner.state == "running"
        assert runner.pid == str(proc.pid)

        status = await asyncio.to_thread(run_cli, "status", "--nats-url", nats_server.url, "--json")
        assert status.returncode == 0, status.stderr
        assert "runner" in {s["name"] for s in json.loads(status.stdout)["services"]}

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_python_m_evertune_reports_a_bad_input_in_one_line() -> None:
    """The entry point itself, as a user starts it (every other error is checked in this process)."""
    result = evertune("run", "runner")
    assert_one_line_error(result, "EVERTUNE_NATS_URL")
    assert result.returncode == 2


def test_run_without_nats_or_with_an_unknown_service_is_one_line() -> None:
    assert_one_line_error(run_cli("run", "runner"), "EVERTUNE_NATS_URL")
    result = run_cli("run", "mailer", env=cli_env(EVERTUNE_NATS_URL="nats://127.0.0.1:1"))
    assert_one_line_error(result, "unknown service 'mailer'", "gateway")


async def test_events_tail_filters_by_kind_and_endpoint(
    nats_server: EmbeddedNats, js: JetStreamContext
) -> None:
    breach = events_pb2.SlaBreach()
    wanted = new_event(EventKind.SLA_BREACH, endpoint="tail-a", source="sla-monitor", payload_message=breach)
    other_endpoint = new_event(
        EventKind.SLA_BREACH, endpoint="tail-b", source="sla-monitor", payload_message=breach
    )
    other_kind = new_event(
        EventKind.SLA_RESOLVED,
        endpoint="tail-a",
        source="sla-monitor",
        payload_message=events_pb2.SlaResolved(),
    )
    for event in (other_endpoint, other_kind, wanted):
        await publish_event(js, event)

    args = ("events", "tail", "--nats-url", nats_server.url, "--all", "--count", "1")
    result = await asyncio.to_thread(run_cli, *args, "--kind", "sla.breach", "--endpoint", "tail-a", "--json")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    assert printed["id"] == wanted.id and printed["kind"] == "sla.breach" and printed["endpoint"] == "tail-a"

    readable = await asyncio.to_thread(run_cli, *args, "--endpoint", "tail-a")
    assert readable.returncode == 0, readable.stderr
    assert "sla.resolved" in readable.stdout and "tail-a" in readable.stdout


def test_events_tail_bad_filters_are_one_line(nats_server: EmbeddedNats) -> None:
    base = ("events", "tail", "--nats-url", nats_server.url)
    assert_one_line_error(run_cli(*base, "--kind", "sla.bleach"), "unknown event kind 'sla.bleach'")
    assert_one_line_error(run_cli(*base, "--endpoint", "a.b"), "'a.b'")


def test_bench_json_last_line_is_one_object() -> None:
    result = run_cli("bench", "bus", "--quick", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["benchmark"] == "bus"
    assert figures["batched_records_per_s"] > 0 and figures["awaited_msgs_per_s"] > 0

    listed = run_cli("bench", "list")
    assert "bus" in listed.stdout and "store" in listed.stdout
    assert_one_line_error(run_cli("bench", "nope"), "unknown benchmark 'nope'")


def test_every_command_has_help() -> None:
    for command in (["up"], ["status"], ["run"], ["events", "tail"], ["bench"]):
        result = run_cli(*command, "--help")
        assert result.returncode == 0 and "usage: evertune" in result.stdout, command
