"""The shell every engine process runs in: start a server, wait until it is ready, check its
health, scrape its metrics, and stop it without leaving a process behind.

A server runs in its own process group (vLLM spawns an engine-core and a worker process beside its
API server), with stdout and stderr in one log file and a temp folder of its own (`scratch`,
`TMPDIR`), removed when it stops. `stop()` signals the whole group: SIGTERM, then SIGKILL for
whatever is left after the timeout. The server also gets SIGTERM if the process that started it
dies (Linux parent-death signal), so it does not outlive a killed evertune.

`ProcessEngine` is the lifecycle; an engine kind (vLLM, the sim engine, llama.cpp) says only what it
runs (`command`) and how its /metrics read (`parse_metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar, Self

import aiohttp

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.errors import EngineNotRunning, EngineStartFailed
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.engines.metrics import EngineMetrics, fetch_metrics
from evertune.infra.child_guard import guarded
from evertune.infra.nats_server import free_port

#: Lines of the engine log an `EngineStartFailed` carries.
TAIL_LINES = 30
_POLL_INTERVAL_S = 0.25
_HEALTH_TIMEOUT_S = 2.0
#: Lines of the log searched for the cause of a failed start (the root cause of an engine-core
#: failure sits above the API server's own traceback, often 100+ lines before the end).
CAUSE_SEARCH_LINES = 600
#: An exception with its message: `SomeError: what happened`.
_EXCEPTION = re.compile(r"\b[A-Z]\w*(Error|Exception|Exit): \S")
#: An error line without an exception (argparse's `error:`, vLLM's `ERROR` records).
_ERROR = re.compile(r"(\berror:|\bERROR\b)")
#: Exceptions that only wrap the real cause, which vLLM logs above them.
_WRAPPERS = ("See root cause above", "Engine core initialization failed", "EngineCore failed to start")
#: vLLM's record prefix: `(Worker pid=1) ERROR 11-29 22:28:37 [file.py:953] `.
_PREFIX = re.compile(
    r"^(\(\w+ pid=\d+\)\s*)?((DEBUG|INFO|WARNING|ERROR|CRITICAL) [\d-]+ [\d:]+ \[[^\]]*\]\s*)?"
)


def start_failure_cause(lines: list[str]) -> str:
    """The log line that best says why a start failed, without vLLM's record prefix.

    The last exception that is not one of vLLM's wrappers ("see root cause above"), else the last
    wrapper, else the last error line, else the last line.
    """
    exceptions = [line for line in lines if _EXCEPTION.search(line)]
    causes = [line for line in exceptions if not any(w in line for w in _WRAPPERS)]
    errors = [line for line in lines if _ERROR.search(line)]
    others = [line for line in lines if line.strip()]
    for found in (causes, exceptions, errors, others):
        if found:
            return _trim(_PREFIX.sub("", found[-1].strip()))
    return "empty log"


def _trim(line: str, width: int = 240) -> str:
    text = " ".join(line.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _read_tail(path: Path, n: int) -> list[str]:
    """The last `n` lines of a file (reads at most its last 256 KiB); [] when unreadable."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read()
    except OSError:
        return []
    lines = data.decode(errors="replace").splitlines()
    return lines[-n:] if n > 0 else []


def process_group_pids(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group `pgid` (Linux /proc)."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name, which is in parentheses and may hold spaces.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return sorted(pids)


async def _group_gone(pgid: int, timeout_s: float) -> bool:
    """Poll until no live process is left in group `pgid`; False if some remain after `timeout_s`."""
    polls = max(int(timeout_s / 0.05), 1)
    for _ in range(polls):
        if not process_group_pids(pgid):
            return True
        await asyncio.sleep(0.05)
    return not process_group_pids(pgid)


class ServedInBlock(ABC):
    """`async with engine:` starts it, waits until it is ready, and stops it on the way out."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def wait_ready(self, timeout_s: float = 300.0) -> None: ...

    @abstractmethod
    async def stop(self, timeout_s: float = 20.0) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        try:
            await self.wait_ready()
        except BaseException:
            # Not ready (failed, timed out, or the caller was cancelled): never leave it running.
            await asyncio.shield(self.stop())
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


class ProcessEngine(ServedInBlock):
    """One engine server process for an `EngineSpec` (see the module doc).

    `await start()`, `await wait_ready()`, use `base_url`, `await stop()`; or `async with` for all
    three. Subclasses validate the spec in their constructor (a refused knob raises `KnobRefused`
    before any process exists) and give `command` and `parse_metrics`.
    """

    #: The engine's name in messages and in its log file's name ("vllm", "sim", "llama.cpp").
    name: ClassVar[str]

    def __init__(
        self,
        spec: EngineSpec,
        *,
        log_dir: Path,
        hardware: HardwareProfile,
        host: str = "127.0.0.1",
        port: int | None = None,
        served_model_name: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        cpu_cores: Sequence[int] = (),
    ) -> None:
        self.spec = spec
        self.hardware = hardware
        #: CPU cores the whole server keeps to (process affinity; the engine binds its threads
        #: there too where it can); empty: any
        self.cpu_cores = list(cpu_cores)
        self.host = host
        self.port = port or free_port()
        self.served_model_name = served_model_name
        self.log_dir = log_dir
        self.extra_env: dict[str, str] = dict(extra_env or {})
        #: the engine's own temp folder while it runs (`TMPDIR`), removed when it stops
        self.scratch: Path | None = None
        self.startup_s: float | None = None  #: seconds from start() to ready, once ready
        self._proc: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._started_at = 0.0

    @abstractmethod
    def command(self) -> tuple[list[str], dict[str, str]]:
        """The command line and the full environment the engine is started with."""

    @abstractmethod
    def parse_metrics(self, text: str, *, scraped_at: float) -> EngineMetrics:
        """The engine's /metrics text as `EngineMetrics`."""

    # -- where it is ------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """Base URL of the OpenAI-compatible server (`/v1/...`, `/health`, `/metrics` under it)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def model_name(self) -> str:
        """The name clients put in the OpenAI `model` field."""
        return self.served_model_name or self.spec.model

    @property
    def log_file(self) -> Path:
        """The engine's stdout and stderr."""
        return self.log_dir / f"{self.name}-{self.port}.log"

    @property
    def pid(self) -> int | None:
        """Pid of the server, which leads the engine's process group; None when not started."""
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        """True from start() until the process exits or is stopped."""
        return self._proc is not None and self._proc.returncode is None

    def log_tail(self, n: int = TAIL_LINES) -> list[str]:
        """The last `n` lines of the engine's log."""
        return _read_tail(self.log_file, n)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the server process (returns at once; `wait_ready` waits for it to serve)."""
        if self.running:
            return
        # Started again after its process exited, without a stop: the last run's folder and log go.
        self._close_log()
        self._remove_scratch()
        self.scratch = Path(tempfile.mkdtemp(prefix=f"evertune-engine-{self.port}-"))
        try:
            argv, env = self.command()
            self._log = await asyncio.to_thread(self._open_log, argv)
        except BaseException:
            self._remove_scratch()
            raise
        self._started_at = time.monotonic()
        self.startup_s = None
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *guarded(argv, cpu_cores=self.cpu_cores, env=env),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=self._log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as err:
            self._close_log()
            self._remove_scratch()
            raise EngineStartFailed(
                f"cannot run {argv[0]}: {err.strerror or err}", log_file=str(self.log_file)
            ) from None
        if self._session is None:
            self._session = aiohttp.ClientSession()

    def _open_log(self, argv: list[str]) -> IO[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_file.open("ab")
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        return log

    async def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Return once GET /health answers 200; raise `EngineStartFailed` (and stop the engine)
        when the process exits first or `timeout_s` runs out. The error carries the log tail."""
        proc = self._require_proc()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        exited = asyncio.ensure_future(proc.wait())
        try:
            while True:
                if proc.returncode is not None:
                    await self._fail(f"{self.name} exited with code {proc.returncode} before it was ready")
                if await self.health():
                    self.startup_s = time.monotonic() - self._started_at
                    return
                if loop.time() >= deadline:
                    await self._fail(f"{self.name} not ready after {timeout_s:g} s on {self.base_url}")
                # Sleeps one poll interval, or less when the process exits.
                await asyncio.wait({exited}, timeout=_POLL_INTERVAL_S)
        finally:
            exited.cancel()

    async def _fail(self, what: str) -> None:
        await self.stop()
        lines = await asyncio.to_thread(self.log_tail, CAUSE_SEARCH_LINES)
        raise EngineStartFailed(
            f"{what}: {start_failure_cause(lines)} (log {self.log_file})",
            log_tail=lines[-TAIL_LINES:],
            log_file=str(self.log_file),
        )

    async def health(self) -> bool:
        """True when the process runs and GET /health answers 200 within 2 s."""
        if not self.running or self._session is None:
            return False
        try:
            async with self._session.get(
                f"{self.base_url}/health", timeout=aiohttp.ClientTimeout(total=_HEALTH_TIMEOUT_S)
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def scrape_metrics(self) -> EngineMetrics:
        """One scrape of /metrics (raises `MetricsUnavailable` when it cannot be read)."""
        self._require_proc()
        assert self._session is not None
        return await fetch_metrics(
            self._session, self.base_url, parse=self.parse_metrics, scraped_at=time.time()
        )

    async def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL it after `timeout_s`; returns when no process of the
        group is left. Safe to call twice, or when the process already exited."""
        proc, self._proc = self._proc, None
        if proc is not None:
            pgid = proc.pid
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            self._signal_group(pgid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), max(deadline - loop.time(), 0.01))
            # The engine core and workers may outlive the API server by a moment.
            gone = await _group_gone(pgid, max(deadline - loop.time(), 0.0))
            if proc.returncode is None or not gone:
                self._signal_group(pgid, signal.SIGKILL)
                await proc.wait()
                await _group_gone(pgid, timeout_s)
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._close_log()
        self._remove_scratch()

    def _remove_scratch(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _require_proc(self) -> asyncio.subprocess.Process:
        if self._proc is None:
            raise EngineNotRunning(f"engine on port {self.port} is not started")
        return self._proc
