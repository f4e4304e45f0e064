"""`evertune up` as a user runs it: start, ready, status, a second up refused, Ctrl-C, errors.

The `up` that runs until Ctrl-C is a subprocess, and so is every `up` that opens the chDB store on
its data dir (chDB runs one engine per process, and this process holds the session's); `status`, the
refused second `up` and the errors found before a store is opened run in this process."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from evertune.apps.services import SERVICE_NAMES
from tests.apps.cli.helpers import (
    assert_one_line_error,
    cli_env,
    evertune,
    processes_mentioning,
    run_cli,
    start_evertune,
    wait_up_ready,
)


def test_up_status_second_up_and_ctrl_c(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    proc = start_evertune("up", "--data-dir", str(data_dir))
    try:
        lines = wait_up_ready(proc)
        assert any("nats" in line and "(embedded)" in line for line in lines)

        status = run_cli("status", "--data-dir", str(data_dir), "--json")
        assert status.returncode == 0, status.stderr
        found = json.loads(status.stdout.strip().splitlines()[-1])
        states = {s["name"]: s["state"] for s in found["services"]}
        assert states == dict.fromkeys(SERVICE_NAMES, "running")
        deployer = next(s for s in found["services"] if s["name"] == "deployer")
        assert deployer["details"]["listen"]["grpc"].startswith("127.0.0.1:")
        # every service's metrics URL, on the free ports cli_env asks for, in runtime.json and status
        metrics = json.loads((data_dir / "runtime.json").read_text())["metrics"]
        assert set(metrics) == set(SERVICE_NAMES)
        assert not any(
            url.endswith((":9401/metrics", ":9405/metrics", ":8080/metrics")) for url in metrics.values()
        )
        assert f"http://{deployer['details']['listen']['metrics']}/metrics" == metrics["deployer"]
        # the embedded NATS has a user per service and an admin (docs/security.md): status logged in
        # as the admin, from runtime.json (0600), and does not print the password; without it, refused
        assert (data_dir / "runtime.json").stat().st_mode & 0o077 == 0
        assert found["nats_url"].startswith("nats://admin:***@127.0.0.1:")
        anonymous = found["nats_url"].replace("admin:***@", "")
        assert_one_line_error(run_cli("status", "--nats-url", anonymous), "refused the login")

        second = run_cli("up", "--data-dir", str(data_dir))  # the lock is the running up's
        assert_one_line_error(second, "in use", str(data_dir))

        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=15)
        out = proc.stdout.read() if proc.stdout else ""
        assert code == 0, (out, proc.stderr.read() if proc.stderr else "")
        assert "stopped" in out
        assert processes_mentioning(str(data_dir)) == []
        assert not (data_dir / "runtime.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # The data dir is free again, and what was stored survives a restart.
    again = start_evertune("up", "--data-dir", str(data_dir), "--duration", "1")
    try:
        wait_up_ready(again)
        assert again.wait(timeout=30) == 0
    finally:
        if again.poll() is None:
            again.kill()
            again.wait()


def test_status_when_nothing_runs(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("status", "--data-dir", str(tmp_path)), "nothing runs")


def test_unreachable_nats_is_one_line(tmp_path: Path, closed_port: int) -> None:
    env = cli_env(EVERTUNE_NATS_URL=f"nats://127.0.0.1:{closed_port}")
    started = time.monotonic()
    result = run_cli("up", "--data-dir", str(tmp_path), env=env)
    assert_one_line_error(result, "cannot reach NATS", str(closed_port))
    assert time.monotonic() - started < 20


def test_bad_clickhouse_url_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    result = run_cli("up", "--data-dir", str(tmp_path), env=cli_env(EVERTUNE_CLICKHOUSE_URL="ftp://x/"))
    line = assert_one_line_error(result, "EVERTUNE_CLICKHOUSE_URL")
    assert result.returncode == 2, line


def test_unreachable_clickhouse_server_is_one_line_and_leaves_nothing_running(
    tmp_path: Path, closed_port: int
) -> None:
    env = cli_env(EVERTUNE_CLICKHOUSE_URL=f"http://127.0.0.1:{closed_port}/")
    result = run_cli("up", "--data-dir", str(tmp_path), env=env)  # a server URL: no chDB here
    assert_one_line_error(result, str(closed_port))
    assert processes_mentioning(str(tmp_path)) == []


def test_locked_chdb_folder_is_one_line(tmp_path: Path) -> None:
    # a subprocess: the up opens chDB on its data dir (one engine per process)
    folder = tmp_path / "clickhouse"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, clickhouse_connect\n"
            f"c = clickhouse_connect.get_client(dsn='chdb://{folder}')\n"
            "c.command('SELECT 1'); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = evertune("up", "--data-dir", str(tmp_path), timeout=60)
        assert_one_line_error(result, str(folder))
    finally:
        holder.kill()
        holder.wait()


def test_invalid_setting_is_one_line_naming_it(tmp_path: Path) -> None:
    result = run_cli("up", "--data-dir", str(tmp_path), env=cli_env(EVERTUNE_SHUTDOWN_TIMEOUT_S="soon"))
    assert_one_line_error(result, "EVERTUNE_SHUTDOWN_TIMEOUT_S")
    result = run_cli("up", "--data-dir", str(tmp_path), env=cli_env(EVERTUNE_RUNNER_HARDWARE="Not A Class"))
    assert_one_line_error(result, "EVERTUNE_RUNNER_HARDWARE")


def test_taken_gateway_port_is_one_line(tmp_path: Path) -> None:
    # a subprocess: the up opens chDB on its data dir (one engine per process) before the gateway
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = evertune("up", "--data-dir", str(tmp_path), env=cli_env(EVERTUNE_GATEWAY_PORT=str(port)))
    assert_one_line_error(result, f"127.0.0.1:{port}", "EVERTUNE_GATEWAY_PORT")
    assert processes_mentioning(str(tmp_path)) == []
