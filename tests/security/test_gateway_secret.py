"""A gateway that joins a NATS of its own refuses the public development prefix secret (hole 10 of
the security issue): with it, anyone could recompute the prefix hashes of guessed prompts."""

from __future__ import annotations

import pytest

from evertune.infra.nats_server import EmbeddedNats
from tests.apps.cli.helpers import assert_one_line_error, cli_env, run_cli


@pytest.mark.timeout(60)  # a gateway that starts instead runs until stopped
def test_run_gateway_refuses_the_public_prefix_secret(nats_server: EmbeddedNats) -> None:
    env = cli_env(EVERTUNE_NATS_URL=nats_server.url, EVERTUNE_GATEWAY_PORT="0")
    result = run_cli("run", "gateway", env=env)
    assert_one_line_error(result, "EVERTUNE_GATEWAY_PREFIX_SECRET", "built-in value is public")
    assert result.returncode == 2
