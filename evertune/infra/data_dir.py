"""The data dir: one `evertune up` at a time holds it, and tells others where it listens.

`<data-dir>/evertune.lock` is held with an exclusive `flock` for the life of `evertune up`; a second
`up` fails at once. `<data-dir>/runtime.json` says where the running stack listens (NATS URL, gRPC
ports, each service's metrics URL), so `evertune status` and `evertune events tail` find it from
the data dir alone.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from evertune.errors import DataDirInUse, FailedPrecondition

LOCK_FILE = "evertune.lock"
RUNTIME_FILE = "runtime.json"


@dataclass
class Runtime:
    """What a running `evertune up` publishes about itself in `runtime.json`."""

    pid: int  #: process id of `evertune up`
    nats_url: str  #: where its NATS listens
    clickhouse_url: str  #: the store it opened
    started_at: float  #: unix seconds
    listen: dict[str, str] = field(default_factory=dict)  #: service -> address it serves on
    #: service -> the URL Prometheus scrapes it on (the port each bound, free ones included)
    metrics: dict[str, str] = field(default_factory=dict)


class DataDirLock:
    """Exclusive hold on a data dir. `acquire()` raises `DataDirInUse` with the holder's pid."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.data_dir / LOCK_FILE, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise DataDirInUse(
                f"data dir {self.data_dir} is in use by another evertune (pid {holder}); stop it first"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def write_runtime(data_dir: Path, runtime: Runtime) -> None:
    path = data_dir / RUNTIME_FILE
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    # 0600: its NATS URL may carry the embedded admin's password
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        handle.write(json.dumps(asdict(runtime), indent=2))
    tmp.replace(path)


def remove_runtime(data_dir: Path) -> None:
    (data_dir / RUNTIME_FILE).unlink(missing_ok=True)


def read_runtime(data_dir: Path) -> Runtime:
    """The runtime of the `evertune up` on `data_dir`, or `FailedPrecondition` if none runs."""
    path = data_dir / RUNTIME_FILE
    try:
        raw = json.loads(path.read_text())
        runtime = Runtime(**raw)
    except (OSError, ValueError, TypeError):
        raise FailedPrecondition(f"nothing runs on data dir {data_dir} (no {RUNTIME_FILE})") from None
    if not _alive(runtime.pid):
        raise FailedPrecondition(f"nothing runs on data dir {data_dir} (pid {runtime.pid} has exited)")
    return runtime


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
