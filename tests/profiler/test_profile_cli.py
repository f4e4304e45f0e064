"""`evertune profile show`: against a running profiler on the test NATS, and its one-line errors (in
this process), and reading a chDB store of its own (a subprocess: chDB runs one engine per process)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client

from evertune.apps.cli.profile import ask, check_plot_path, plot, text_lines
from evertune.errors import InvalidArgument, NotFound
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.store import Store
from tests.apps.cli.helpers import REPO, assert_one_line_error, cli_env, evertune, run_cli
from tests.profiler.test_profiler_service import Running, db, insert, recent_samples, running

__all__ = ["db", "running"]  # fixtures used here


async def profile_cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """The command in this process, on a thread (the profiler answers on this test's loop)."""
    result = await asyncio.to_thread(run_cli, *args, env=env)
    return result.returncode, result.stdout, result.stderr


async def test_show_json_text_and_plot(
    nats_server: EmbeddedNats, nc: Client, db: Store, running: Running, tmp_path: Path
) -> None:
    samples = recent_samples(seed=21)
    await insert(db, running.endpoint, samples)
    env = cli_env(EVERTUNE_PROFILER_REQUEST_SUBJECT=running.settings.request_subject)
    png = tmp_path / "profile.png"
    code, out, err = await profile_cli(
        "profile",
        "show",
        "--endpoint",
        running.endpoint,
        "--nats-url",
        nats_server.url,
        "--json",
        "--plot",
        str(png),
        env=env,
    )
    assert code == 0, err
    stored = json.loads(out.strip().splitlines()[-1])
    assert stored["version"] == 1 and stored["profile"]["requests"] == len(samples)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, err = await profile_cli(
        "profile", "show", "--endpoint", running.endpoint, "--nats-url", nats_server.url, env=env
    )
    assert code == 0, err
    assert out.startswith(f"profile {stored['profile_id']} v1 (api")
    assert (
        f"endpoint {running.endpoint}: {len(samples)} requests" in out
        and "bottleneck (telemetry): prefill" in out
    )
    # Unknown endpoint and an endpoint without data: one line each.
    code, _, err = await profile_cli(
        "profile", "show", "--endpoint", "nope", "--nats-url", nats_server.url, env=env
    )
    assert code != 0 and err.strip() == "evertune: unknown endpoint 'nope': no telemetry and no profile of it"
    code, _, err = await profile_cli(
        "profile",
        "show",
        "--endpoint",
        running.endpoint,
        "--build",
        "--window",
        "1",
        "--nats-url",
        nats_server.url,
        env=env,
    )
    assert code != 0 and err.strip().startswith(
        f"evertune: no data: no telemetry for endpoint '{running.endpoint}'"
    )
    assert len(err.strip().splitlines()) == 1


async def test_ask_and_render_in_process(nc: Client, db: Store, running: Running, tmp_path: Path) -> None:
    await insert(db, running.endpoint, recent_samples(seed=22))
    stored = await ask(nc, endpoint=running.endpoint, subject=running.settings.request_subject)
    lines = text_lines(stored)
    assert any(line.startswith("prefix reuse:") for line in lines)
    plot(stored, tmp_path / "p.svg")
    assert (tmp_path / "p.svg").read_text().lstrip().startswith("<?xml")
    with pytest.raises(NotFound):
        await ask(nc, endpoint="missing-endpoint", subject=running.settings.request_subject)


def test_plot_path_checks(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"folder .* does not exist"):
        check_plot_path(tmp_path / "no" / "x.png")
    with pytest.raises(InvalidArgument, match=r"use a \.png"):
        check_plot_path(tmp_path / "x.txt")
    with pytest.raises(InvalidArgument, match="it is a folder"):
        (tmp_path / "d.png").mkdir()
        check_plot_path(tmp_path / "d.png")
    check_plot_path(tmp_path / "ok.png")


def test_errors_are_one_line(tmp_path: Path) -> None:
    result = run_cli("profile", "show", "--endpoint", "x", "--plot", str(tmp_path / "missing" / "x.png"))
    assert_one_line_error(result, "cannot write plot", "does not exist")
    result = run_cli("profile", "show", "--endpoint", "x", "--data-dir", str(tmp_path))
    assert_one_line_error(result, "nothing runs on data dir")


FILL_STORE = """
import asyncio, sys, time
from datetime import UTC, datetime, timedelta
from evertune.infra.store import migrate, open_store
from evertune.profiler.builder import CreateRequest, create_profile
from evertune.profiler.profile import ProfileConfig
from tests.profiler.synthetic import voice
from tests.profiler.test_profiler_service import insert

async def main() -> None:
    store = await open_store(f"chdb://{sys.argv[1]}", database="evertune")
    await migrate(store)
    start = time.time() - 900
    await insert(store, "voice", [g.sample for g in voice(seed=31, start_s=start, duration_s=300)])
    await insert(store, "fresh", [g.sample for g in voice(seed=32, start_s=start, duration_s=120)])
    now = datetime.now(UTC)
    request = CreateRequest(
        endpoint="voice", since=now - timedelta(hours=1), until=now, trigger="api", created=now
    )
    await create_profile(store, request, config=ProfileConfig(block_tokens=16), max_samples=1000)
    await store.close()

asyncio.run(main())
"""


def test_without_a_running_stack_the_store_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "clickhouse"
    filled = subprocess.run(
        [sys.executable, "-c", FILL_STORE, str(folder)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert filled.returncode == 0, filled.stderr
    env = cli_env(EVERTUNE_PROFILER_PREFIX_BLOCK_TOKENS="16")
    # subprocesses: the command opens the chDB store on the data dir, and this process holds the
    # session's chDB engine (one a process)
    stored = evertune(
        "profile", "show", "--endpoint", "voice", "--data-dir", str(tmp_path), "--json", env=env
    )
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["version"] == 1
    fresh = evertune("profile", "show", "--endpoint", "fresh", "--data-dir", str(tmp_path), env=env)
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.startswith("profile (not stored) v0 (cli") and "endpoint fresh:" in fresh.stdout
    result = evertune("profile", "show", "--endpoint", "nope", "--data-dir", str(tmp_path), env=env)
    assert_one_line_error(result, "unknown endpoint 'nope'")
