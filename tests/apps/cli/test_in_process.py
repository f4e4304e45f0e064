"""`run_cli`, the tests' way to run a command in this process, leaves the process as it found it."""

from __future__ import annotations

import os

import structlog

from evertune.infra import logging as evertune_logging
from evertune.infra.bus import connection
from tests.apps.cli.helpers import assert_one_line_error, cli_env, run_cli


def test_a_command_leaves_the_environment_and_logging_as_they_were(closed_port: int) -> None:
    environ, config = dict(os.environ), structlog.get_config()
    configured = evertune_logging._configured
    env = cli_env(EVERTUNE_CONNECT_TIMEOUT_S="0.5", EVERTUNE_LOG_LEVEL="warning")
    down = run_cli("slo", "status", "--nats-url", f"nats://127.0.0.1:{closed_port}", env=env)
    assert_one_line_error(down, "cannot reach NATS")
    assert "nats error" in down.stderr  # logged, as configured by the command, to its stderr
    assert dict(os.environ) == environ
    assert structlog.get_config() == config and evertune_logging._configured == configured
    # the module's logger, used by the command, logs with this process's configuration again
    with structlog.testing.capture_logs() as logs:
        connection.log.warning("after the command")
    assert [entry["event"] for entry in logs] == ["after the command"]
