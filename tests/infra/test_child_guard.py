"""A guarded child: the program runs in the guard's own process, on the given cores, and dies with
its parent; a missing program is refused in the parent."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from evertune.infra.child_guard import guarded

_REPORT = "import os; print(os.getpid(), sorted(os.sched_getaffinity(0)))"


async def _run(argv: list[str]) -> str:
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    assert process.returncode == 0
    pid, _, cores = out.decode().strip().partition(" ")
    assert int(pid) == process.pid  # exec in place: the pid the parent holds is the program's
    return cores


async def test_the_program_runs_in_place_on_the_given_cores() -> None:
    core = min(os.sched_getaffinity(0))
    assert await _run(guarded([sys.executable, "-c", _REPORT], cpu_cores=[core])) == f"[{core}]"


async def test_without_cores_the_program_keeps_the_parents() -> None:
    assert await _run(guarded([sys.executable, "-c", _REPORT])) == str(sorted(os.sched_getaffinity(0)))


def test_a_missing_program_is_refused_in_the_parent(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no-such-program"):
        guarded([str(tmp_path / "no-such-program")])
    with pytest.raises(FileNotFoundError, match="no-such-program"):
        guarded(["no-such-program"], env={"PATH": str(tmp_path)})


async def test_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    # A parent process starts a guarded `sleep`, says its pid, and is killed outright.
    parent = textwrap.dedent("""
        import subprocess, sys
        from evertune.infra.child_guard import guarded
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
        child = subprocess.Popen(guarded(["sleep", "60"]), **quiet)
        print(child.pid, flush=True)
        sys.stdin.read()
    """)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", parent, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    child = int(await asyncio.wait_for(process.stdout.readline(), timeout=10))
    await asyncio.sleep(0.5)  # let the guard set the death signal and exec
    assert _state(child) != "gone"
    process.send_signal(signal.SIGKILL)
    await process.wait()
    for _ in range(100):  # the orphan is reaped by init once SIGTERM ends it
        if _state(child) in ("gone", "Z"):
            return
        await asyncio.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the guarded child outlived its parent")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"
