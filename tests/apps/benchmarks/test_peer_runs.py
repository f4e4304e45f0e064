"""A peer's servers are counted and capped by pid: a stand-in peer (a Python process that starts
stand-in servers through the shim's `announce`, each in its own session as the peers start theirs)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from evertune.apps.benchmarks.peer_runs import alive, peer_environment, run_peer
from evertune.apps.benchmarks.vllm_cli import CLIENT_CORES, SERVE_CORES, SERVERS_LOG

SERVER = (
    "from evertune.apps.benchmarks.vllm_cli import announce; import time; "
    "announce(['vllm', 'serve']); time.sleep({})"
)
PEER = """
import subprocess, sys
command = [sys.executable, "-c", {server!r}]
servers = [subprocess.Popen(command, start_new_session=True) for _ in range({count})]
for server in servers:
    server.wait()
"""


def _peer(server_s: float, count: int) -> list[str]:
    return [sys.executable, "-c", PEER.format(server=SERVER.format(server_s), count=count)]


async def test_a_peer_that_ends_leaves_the_lives_of_its_servers(tmp_path: Path) -> None:
    env = {**os.environ, SERVERS_LOG: str(tmp_path / "servers.log")}
    done = await run_peer(
        _peer(0.5, 2),
        env=env,
        cwd=tmp_path,
        servers_log=tmp_path / "servers.log",
        log=tmp_path / "peer.log",
        cap_s=60,
    )
    assert done.returncode == 0 and not done.stopped_at_cap
    assert len(done.lives) == 2 and all(life.ended is not None for life in done.lives)
    assert all(0.3 < life.seconds(0) < 5 for life in done.lives)


async def test_a_peer_past_its_cap_is_stopped_with_its_servers(tmp_path: Path) -> None:
    env = {**os.environ, SERVERS_LOG: str(tmp_path / "servers.log")}
    done = await run_peer(
        _peer(120, 1),
        env=env,
        cwd=tmp_path,
        servers_log=tmp_path / "servers.log",
        log=tmp_path / "peer.log",
        cap_s=1.0,
    )
    assert done.stopped_at_cap and done.returncode != 0
    [life] = done.lives
    assert life.ended is not None and life.seconds(0) < 30
    assert not alive(life.pid)  # gone, or a zombie nobody reaps (a container's init may not)


def test_the_peers_environment_splits_the_cores_as_the_runner_does(tmp_path: Path) -> None:
    allowed = os.sched_getaffinity(0)
    engine = set(sorted(allowed)[:-1]) or set(allowed)
    env = peer_environment(
        {"PATH": "/usr/bin"}, bin_dir=tmp_path, servers_log=tmp_path / "s.log", engine_cores=engine
    )
    assert env["PATH"] == f"{tmp_path}{os.pathsep}/usr/bin"
    assert env["PYTHONHASHSEED"] == "0" and env[SERVERS_LOG] == str(tmp_path / "s.log")
    assert env[SERVE_CORES] == ",".join(str(c) for c in sorted(engine))
    assert set(map(int, filter(None, env[CLIENT_CORES].split(",")))) == allowed - engine
