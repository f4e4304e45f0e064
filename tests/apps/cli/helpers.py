"""Helpers for tests that run the `evertune` command as a user would: a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from evertune.infra import repository

REPO = repository.ROOT


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for an `evertune` subprocess: no inherited EVERTUNE_* settings, free ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVERTUNE_")}
    env.update(
        EVERTUNE_DEPLOYER_GRPC_PORT="0",
        EVERTUNE_SEARCHER_GRPC_PORT="0",
        EVERTUNE_GATEWAY_PORT="0",
        EVERTUNE_LOG_LEVEL="warning",
        EVERTUNE_CONNECT_TIMEOUT_S="2",
    )
    env.update(extra)
    return env


def evertune(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evertune", *args],
        env=env or cli_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_evertune(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "evertune", *args],
        env=env or cli_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The command failed with a non-zero exit and one `evertune: ...` line, no traceback."""
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("evertune: ")]
    assert len(errors) == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == errors[0]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains `text` (to prove nothing was left)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids
