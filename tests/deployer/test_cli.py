"""`evertune endpoints|deployments|deploy` against a running deployer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from evertune.apps.cli import main
from evertune.apps.cli.endpoint import engine_config
from evertune.errors import InvalidArgument
from evertune.v1 import endpoint_pb2 as D
from tests.deployer.conftest import TOKEN_A, Stack
from tests.deployer.helpers import new_name
from tests.deployer.test_api import endpoint_in


def test_knobs() -> None:
    config = engine_config(
        ["max_num_seqs=64", "enforce_eager=true", "kv_cache_space_gib=1.5", "dtype=float32"], engine=""
    )
    assert config.max_num_seqs == 64 and config.enforce_eager and config.kv_cache_space_gib == 1.5
    assert config.dtype == "float32" and not config.engine
    with pytest.raises(InvalidArgument, match="--knob"):
        engine_config(["no_such_knob=1"], engine="")
    with pytest.raises(InvalidArgument, match="expected K=V"):
        engine_config(["max_num_seqs"], engine="")


async def test_create_list_promote_and_delete(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    name = new_name()
    common = ["--address", stack.address, "--token", TOKEN_A]

    async def cli(*argv: str) -> int:
        return await asyncio.to_thread(main, [*argv, *common])

    assert (
        await cli("endpoints", "create", name, "--model", "tiny-model", "--ttft-p99-ms", "400", "--json") == 0
    )
    created = json.loads(capsys.readouterr().out)
    assert created["spec"]["name"] == name and created["spec"]["tenant"] == "tenant-a"
    await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
    assert await cli("endpoints", "list") == 0
    assert name in capsys.readouterr().out
    assert await cli("deploy", "promote", name, "--knob", "max_num_seqs=3") == 0
    assert "PROMOTE" in capsys.readouterr().out
    assert await cli("deployments", "list", name, "--all") == 0
    assert len([line for line in capsys.readouterr().out.splitlines() if line.startswith("dep-")]) == 2
    assert await cli("endpoints", "delete", name) == 0
    assert "DELETING" in capsys.readouterr().out
    assert await cli("endpoints", "get", "no-such-endpoint") == 1
    # the deployer's background work may log to the same stderr meanwhile
    lines = capsys.readouterr().err.splitlines()
    assert "evertune: NOT_FOUND: endpoint no-such-endpoint not found" in lines
    assert [line for line in lines if line.startswith("evertune:")] == [
        "evertune: NOT_FOUND: endpoint no-such-endpoint not found"
    ]


def _json(out: str) -> Any:
    """The JSON line of a command's output (the deployer running in this process may log there too)."""
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


async def test_update(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    name = new_name()
    common = ["--address", stack.address, "--token", TOKEN_A, "--json"]

    async def cli(*argv: str) -> int:
        return await asyncio.to_thread(main, [*argv, *common])

    assert await cli("endpoints", "create", name, "--model", "tiny-model", "--ttft-p99-ms", "400") == 0
    revision = _json(capsys.readouterr().out)["revision"]
    hook = "http://127.0.0.1:9/hook"
    argv = [
        "endpoints",
        "update",
        name,
        "--ttft-p99-ms",
        "650",
        "--policy",
        "off",
        "--webhook",
        f"pager={hook}",
    ]
    assert await cli(*argv, "--expected-revision", str(revision)) == 0
    updated = _json(capsys.readouterr().out)
    spec = updated["spec"]
    assert spec["slo"]["ttftP99Ms"] == 650 and spec["searchPolicy"] == "SEARCH_POLICY_OFF"
    [route] = spec["alertRoutes"]
    assert (route["name"], route["kind"], route["url"]) == ("pager", "ALERT_ROUTE_KIND_WEBHOOK", hook)
    assert spec["model"] == "tiny-model"  # untouched: not in the mask
    assert int(updated["revision"]) > int(revision)
    # a stale revision is refused; so is an update that changes nothing
    assert (
        await cli("endpoints", "update", name, "--itl-p99-ms", "9", "--expected-revision", str(revision)) == 1
    )
    assert "evertune: FAILED_PRECONDITION" in capsys.readouterr().err
    assert await cli("endpoints", "update", name) == 1
    assert "evertune: endpoints update: nothing to change" in capsys.readouterr().err
    assert await cli("endpoints", "update", name, "--no-alert-routes") == 0
    assert "alertRoutes" not in _json(capsys.readouterr().out)["spec"]
