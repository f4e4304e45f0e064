"""Running a peer of `bench peers` (`vllm bench sweep serve`, vllm-optimizer) as a process of its own,
its engine time counted and capped the same way as evertune's.

The peer runs from `.venv-peers/` (`make bench-peers-install`) in its own session, with the `vllm`
shim first on its PATH (`vllm_cli`). Every `vllm serve` it starts logs its pid and start to a file;
`ServerWatch` reads that file and watches each pid (twice a second) until it is gone: a server's
life is its engine time, starts included, as a trial's wall time is for evertune's runner. A peer
whose servers pass the hard cap is stopped: its process group first, then each server still alive,
by pid (never by name).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from evertune.apps.benchmarks.peer_results import ServerLife, engine_seconds, parse_server_log
from evertune.apps.benchmarks.vllm_cli import CLIENT_CORES, SERVE_CORES, SERVERS_LOG
from evertune.errors import FailedPrecondition

#: The peers' environment, made by `make bench-peers-install`.
PEERS_VENV = Path(".venv-peers")
#: Seconds between looks at the peer's servers.
WATCH_S = 0.5
#: Seconds a stopped peer gets to exit after SIGTERM before SIGKILL.
STOP_GRACE_S = 15.0


def peers_bin(root: Path) -> Path:
    """The peers' scripts folder under `root`. Raises FailedPrecondition when it was never installed."""
    folder = root / PEERS_VENV / "bin"
    if not (folder / "vllm-opt").exists() or not (folder / "vllm").exists():
        raise FailedPrecondition(f"{folder} lacks vllm-opt or the vllm shim: run `make bench-peers-install`")
    return folder


class ServerWatch:
    """The lives of the servers a peer started, from the shim's log and their pids."""

    def __init__(self, log: Path) -> None:
        self.log = log  #: the file `vllm_cli` appends "PID START" lines to
        self.lives: list[ServerLife] = []  #: in order of start

    def look(self, now: float) -> list[ServerLife]:
        """Read new starts and mark the servers that are gone; the lives so far."""
        text = self.log.read_text(encoding="utf-8") if self.log.exists() else ""
        for pid, started in parse_server_log(text)[len(self.lives) :]:
            self.lives.append(ServerLife(pid=pid, started=started))
        self.lives = [
            life if life.ended is not None or alive(life.pid) else ServerLife(life.pid, life.started, now)
            for life in self.lives
        ]
        return self.lives

    def running(self) -> list[int]:
        return [life.pid for life in self.lives if life.ended is None]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@dataclass(frozen=True)
class PeerProcess:
    """How a peer's process ended and what its servers spent."""

    returncode: int  #: the peer's exit status (negative: the signal that stopped it)
    lives: list[ServerLife]  #: its servers, in order of start
    stopped_at_cap: bool  #: stopped because its servers passed the cap
    wall_s: float  #: seconds from its start to its exit
    log: Path  #: its stdout and stderr


def peer_environment(
    base: dict[str, str], *, bin_dir: Path, servers_log: Path, engine_cores: set[int] | None
) -> dict[str, str]:
    """`base` (the environment evertune starts its engines with) with the peers' scripts first on
    PATH, Python's hash seeded (vLLM's timed_trace draws tokens from `hash`), the shim's server
    log, and the runner's split of the cores (the engine on `engine_cores`, the client on the rest)."""
    env = dict(base)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', os.environ.get('PATH', ''))}"
    env["PYTHONHASHSEED"] = "0"
    env[SERVERS_LOG] = str(servers_log)
    if engine_cores:
        allowed = os.sched_getaffinity(0)
        env[SERVE_CORES] = ",".join(str(c) for c in sorted(engine_cores))
        env[CLIENT_CORES] = ",".join(str(c) for c in sorted(allowed - engine_cores))
    return env


async def run_peer(
    argv: list[str], *, env: dict[str, str], cwd: Path, servers_log: Path, log: Path, cap_s: float
) -> PeerProcess:
    """Run `argv` to its end, or stop it once its servers' engine time passes `cap_s`."""
    await asyncio.to_thread(servers_log.write_text, "")
    watch = ServerWatch(servers_log)
    started = time.monotonic()
    stopped = False
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT, start_new_session=True
        )
        try:
            while True:
                try:
                    await asyncio.wait_for(process.wait(), timeout=WATCH_S)
                    break
                except TimeoutError:
                    pass
                lives = watch.look(time.time())
                if engine_seconds(lives, now=time.time()) > cap_s:
                    stopped = True
                    await _stop(process, watch)
                    break
        finally:
            if process.returncode is None:  # cancelled: nothing of the peer's may outlive us
                await _stop(process, watch)
    await _wait_servers(watch)
    assert process.returncode is not None
    return PeerProcess(
        returncode=process.returncode,
        lives=watch.look(time.time()),
        stopped_at_cap=stopped,
        wall_s=time.monotonic() - started,
        log=log,
    )


async def _stop(process: asyncio.subprocess.Process, watch: ServerWatch) -> None:
    """SIGTERM to the peer's process group and to each running server's, then SIGKILL after the grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        groups = {process.pid}
        for pid in watch.running():
            with contextlib.suppress(ProcessLookupError):
                groups.add(os.getpgid(pid))
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)
        try:
            await asyncio.wait_for(process.wait(), timeout=STOP_GRACE_S)
        except TimeoutError:
            continue
        watch.look(time.time())
        if not watch.running():
            return


async def _wait_servers(watch: ServerWatch) -> None:
    """Wait until every server the peer started is gone (a peer reaps its own), killing stragglers."""
    deadline = time.monotonic() + STOP_GRACE_S
    while watch.look(time.time()) and watch.running():
        if time.monotonic() > deadline:
            for pid in watch.running():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + STOP_GRACE_S
        await asyncio.sleep(WATCH_S)
