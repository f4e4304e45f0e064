"""Helpers for tests of the `evertune` command.

`run_cli` runs a command in this process (`evertune.apps.cli.main`), as `python -m evertune` would
run it: its own environment, its own stdout and stderr, its exit status. Tests of what a command
prints and of its one-line errors use it. `evertune` and `start_evertune` run `python -m evertune`
as a subprocess, for what needs a process of its own: `evertune up` and `evertune run` until a
signal, Ctrl-C, the data dir's lock held by another process, a chDB store (one engine per process,
and the test process holds the session's), and the one test of the entry point itself.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import structlog
from structlog._config import BoundLoggerLazyProxy

from evertune.apps.cli import main
from evertune.infra import logging as evertune_logging
from tests import checkout

REPO = checkout.ROOT


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of an `evertune` command: no inherited EVERTUNE_* settings, free ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVERTUNE_")}
    env.update(
        EVERTUNE_DEPLOYER_GRPC_PORT="0",
        EVERTUNE_SEARCHER_GRPC_PORT="0",
        EVERTUNE_GATEWAY_PORT="0",
        EVERTUNE_PROFILER_METRICS_PORT="0",
        EVERTUNE_SLA_MONITOR_METRICS_PORT="0",
        EVERTUNE_SEARCHER_METRICS_PORT="0",
        EVERTUNE_RUNNER_METRICS_PORT="0",
        EVERTUNE_DEPLOYER_METRICS_PORT="0",
        EVERTUNE_LOG_LEVEL="warning",
        EVERTUNE_CONNECT_TIMEOUT_S="2",
    )
    env.update(extra)
    return env


class Ran(Protocol):
    """What a finished command left: a `CliResult` or a `subprocess.CompletedProcess`."""

    @property
    def returncode(self) -> int: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


class _Capture(io.StringIO):
    """sys.stdout or sys.stderr while `run_cli` runs a command; one object for the whole session.

    It stays one object because a logger made while a command ran keeps the stream it found (a
    logger bound then and still held, a thread the command left) and may write after the command
    has returned. Outside a command it passes what it is given on to the process's current
    stream; `fileno` is the real one (what `faulthandler` registers)."""

    def __init__(self, name: Literal["stdout", "stderr"]) -> None:
        super().__init__()
        self._name = name
        self.active = False

    def _real(self) -> io.TextIOBase | None:
        real = sys.__stdout__ if self._name == "stdout" else sys.__stderr__
        return real if isinstance(real, io.TextIOBase) else None

    def write(self, text: str) -> int:
        if self.active:
            return super().write(text)
        current = sys.stdout if self._name == "stdout" else sys.stderr
        target = current if current is not self else self._real()
        return target.write(text) if target is not None else len(text)

    def fileno(self) -> int:
        real = self._real()
        if real is None:
            raise io.UnsupportedOperation("fileno")
        return real.fileno()

    def start(self) -> None:
        self.seek(0)
        self.truncate()
        self.active = True


_OUT, _ERR = _Capture("stdout"), _Capture("stderr")
#: One command at a time: the environment, the streams and logging are the process's.
_ONE_AT_A_TIME = threading.Lock()


def _set_environment(env: Mapping[str, str]) -> None:
    for key in [key for key in os.environ if key not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """`env` is the whole environment while the command runs; the process's comes back after,
    whatever the command set (`up --demo` sets its defaults in os.environ)."""
    saved = dict(os.environ)
    _set_environment(env)
    try:
        yield
    finally:
        _set_environment(saved)


def _forget_cached_loggers() -> None:
    """structlog caches a module's logger on its first use (`cache_logger_on_first_use`, as evertune
    configures it): forget those, so that they log with the configuration in force from now on."""
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            if type(value) is BoundLoggerLazyProxy:  # not isinstance: some modules warn on __class__
                vars(value).pop("bind", None)


@contextlib.contextmanager
def _fresh_logging() -> Iterator[None]:
    """The command configures logging as in a process of its own (once, from its settings); the
    configuration of this process comes back after, and module loggers cached while the command
    ran are forgotten."""
    config = structlog.get_config()
    configured = evertune_logging._configured
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    evertune_logging._configured = False
    try:
        yield
    finally:
        structlog.configure(**config)
        _forget_cached_loggers()
        evertune_logging._configured = configured
        root.handlers[:] = handlers
        root.setLevel(level)


def _exit_status(stop: SystemExit) -> int:
    """The status `sys.exit(code)` gives a process (argparse exits 2 on a usage error, 0 on --help)."""
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code
    print(stop.code, file=sys.stderr)
    return 1


def run_cli(*args: str, env: Mapping[str, str] | None = None) -> CliResult:
    """`evertune ARGS` in this process, with `env` (default `cli_env()`) as its whole environment.

    It may call asyncio.run: call it from a sync test, or from a thread (`asyncio.to_thread`) in an
    async one. An exception evertune does not turn into a one-line error propagates (a subprocess
    would print its traceback)."""
    with _ONE_AT_A_TIME, _environment(cli_env() if env is None else env), _fresh_logging():
        _OUT.start()
        _ERR.start()
        try:
            with contextlib.redirect_stdout(_OUT), contextlib.redirect_stderr(_ERR):
                try:
                    code = main(list(args))
                except SystemExit as stop:
                    code = _exit_status(stop)
        finally:
            _OUT.active = _ERR.active = False
        return CliResult(returncode=code, stdout=_OUT.getvalue(), stderr=_ERR.getvalue())


def evertune(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python -m evertune ARGS` as a subprocess, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "evertune", *args],
        env=env or cli_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_evertune(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`python -m evertune ARGS` as a subprocess, left running."""
    return subprocess.Popen(
        [sys.executable, "-m", "evertune", *args],
        env=env or cli_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_up_ready(
    proc: subprocess.Popen[str], *, timeout_s: float = 90.0, stderr_log: Path | None = None
) -> list[str]:
    """Read `evertune up`'s stdout until its "ready in" line; the lines so far. Not ready in time
    (or exited first): the process is killed and an AssertionError shows its output and its stderr
    (the pipe, or the end of `stderr_log` where it writes there)."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if line.startswith("ready in"):
            return lines
    proc.kill()
    stderr = stderr_log.read_text()[-3000:] if stderr_log else proc.stderr.read() if proc.stderr else ""
    raise AssertionError(f"evertune up not ready: {lines} {stderr}")


def assert_one_line_error(result: Ran, *fragments: str) -> str:
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
