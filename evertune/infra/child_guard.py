"""Children that die with their parent and keep to given cores, with no Python run between fork and exec.

A `preexec_fn` runs Python in the forked child of a threaded parent. Under gRPC's threads that
child crashed now and then (SIGSEGV, exit -11, before exec: CI, 2026-12-07). So evertune never
passes one: `guarded(argv, ...)` returns a command line that starts a fresh interpreter on this
module, which sets the parent-death signal and the CPU affinity and then execs `argv` in the same
process (same pid). With no `preexec_fn`, `subprocess` spawns with vfork and runs no fork handlers.

Run as `python -m evertune.infra.child_guard --parent PID [--cores 0,1] -- PROGRAM ARGS...`.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
from collections.abc import Iterable, Mapping, Sequence

_PR_SET_PDEATHSIG = 1
#: The exit status when the program cannot be run (the shell's "command not found").
_CANNOT_RUN = 127


def guarded(
    argv: Sequence[str], *, cpu_cores: Iterable[int] = (), env: Mapping[str, str] | None = None
) -> list[str]:
    """The command line that runs `argv` as this process's guarded child.

    Raises FileNotFoundError (naming the program) here, in the parent, when `argv[0]` is not an
    executable on `env`'s PATH, as spawning it directly would.
    """
    path = (env if env is not None else os.environ).get("PATH")
    program = shutil.which(argv[0], path=path)
    if program is None:
        raise FileNotFoundError(2, "No such file or directory", argv[0])
    cores = sorted(set(cpu_cores))
    cores_flag = ["--cores", ",".join(map(str, cores))] if cores else []
    return [
        sys.executable, "-m", __name__, "--parent", str(os.getpid()), *cores_flag, "--", program,
        *argv[1:],
    ]  # fmt: skip


def _die_with_parent(parent: int) -> None:
    """SIGTERM this process when its parent dies; exit now if the parent is already gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: no such guard
        return
    if os.getppid() != parent:  # the parent died before the guard was set
        raise SystemExit(1)


def main(args: list[str]) -> None:
    """Parse `--parent PID [--cores LIST] -- PROGRAM ARGS...`, guard, and exec the program."""
    if "--" not in args:
        raise SystemExit("child_guard: usage: --parent PID [--cores 0,1] -- PROGRAM ARGS...")
    split = args.index("--")
    options, argv = args[:split], args[split + 1 :]
    flags = dict(zip(options[::2], options[1::2], strict=True))
    _die_with_parent(int(flags["--parent"]))
    if cores := flags.get("--cores"):
        os.sched_setaffinity(0, {int(core) for core in cores.split(",")})
    try:
        os.execv(argv[0], argv)
    except OSError as err:
        print(f"child_guard: cannot run {argv[0]}: {err.strerror or err}", file=sys.stderr)
        raise SystemExit(_CANNOT_RUN) from None


if __name__ == "__main__":
    main(sys.argv[1:])
