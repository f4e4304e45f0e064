"""`evertune up --demo --engine sim` end to end, as a user runs it: a fresh data dir, the whole stack,
the demo endpoint on the sim engine, the voice traffic with its shift, the report."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evertune.domain.perfmodel import Efficiency, save_calibration
from tests.apps.cli.helpers import (
    assert_one_line_error,
    cli_env,
    evertune,
    processes_mentioning,
    run_cli,
    start_evertune,
)

#: Seconds of traffic: long enough for a profile, the shift and drift detection on the sim engine.
DURATION_S = 90
#: Seconds an interrupted demo may take to stop: 2 s alone here; one stop beside a second pytest
#: worker in a fresh-clone CI run (2026-12-05) was still running after 60 s, cause not found, so a
#: stop past this bound now fails with every thread's stack.
STOP_TIMEOUT_S = 120


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh data dir; whatever still mentions it after the test is killed (by pid)."""
    folder = tmp_path / "data"
    try:
        yield folder
    finally:
        for pid in processes_mentioning(str(folder)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_demo_runs_end_to_end_on_the_sim_engine(data_dir: Path, tmp_path: Path) -> None:
    # A calibration in the default data dir (~/.evertune) of a machine 100 times slower: the demo
    # on --data-dir must not read it (one on a development machine once queued every request 30 s).
    home = tmp_path / "home"
    slow = Efficiency(compute=0.005, bandwidth=0.007)
    save_calibration(home / ".evertune", "cpu", {"efficiency": dataclasses.asdict(slow)})
    result = evertune(
        "up",
        "--demo",
        "--engine",
        "sim",
        "--duration",
        str(DURATION_S),
        "--data-dir",
        str(data_dir),
        env=cli_env(HOME=str(home)),
        timeout=DURATION_S + 100,
    )
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]

    # the SLO panel was printed, with figures from the sla-monitor
    panels = [line for line in out.splitlines() if " SLO  phase " in line]
    assert len(panels) >= DURATION_S // 10, out[-2000:]
    lines = out.splitlines()
    heads = [i for i, line in enumerate(lines) if "TTFT p50 ms" in line and "target ms" in line]
    assert any("attainment" in lines[i] and lines[i + 1].split()[3] == "50" for i in heads), out[-2000:]
    assert "traffic shifts" in out

    # the report: markdown, figures, plots
    reports = sorted(data_dir.glob("demo/*/report.md"))
    assert len(reports) == 1, out[-2000:]
    folder = reports[0].parent
    for plot in ("ttft_over_time.png", "ttft_before_after.png"):
        assert (folder / plot).stat().st_size > 10_000
    summary = json.loads((folder / "report.json").read_text())
    assert summary["engine"] == "sim"
    assert summary["requests_sent"] > 200
    assert summary["telemetry_rows"] == summary["requests_sent"]
    assert summary["lost_records"] == 0

    # the loop's events as the services published them: the profile the demo asked for, drift
    # after the shift, and the drift's own profile
    kinds = [e["kind"] for e in summary["events"]]
    assert "endpoint.created" in kinds
    assert kinds.count("profile.ready") >= 2, kinds
    assert "drift.detected" in kinds, kinds
    # every stage happened (the exit status says so too), a promotion among them
    stages = {s["stage"]: s for s in summary["stages"]}
    assert all(s["happened"] for s in stages.values()), stages
    text = reports[0].read_text()
    assert "Every stage of the loop happened in this run." in text
    for stage in stages:
        assert f"| {stage} | yes |" in text
    assert kinds.count("deploy.promoted") >= 2, kinds  # the first deployment's, then the loop's
    # and the loop's promotion says, through the events' cause ids, which profile's search chose it:
    # the demo's own profile (a root) or a drift's (in this short run the search on the demo's
    # profile is still rolling out when the drift comes, 2026-12-07)
    causes = summary["promotion_causes"]
    assert causes[-3:] == ["profile.ready", "search.completed", "deploy.promoted"], causes
    assert causes[0] in ("drift.detected", "profile.ready"), causes
    phases = [row["label"] for row in summary["phases"]]
    assert phases[0] == "before the shift" and phases[-1].startswith("after the promotion"), phases

    # the whole loop ran under the services' own NATS users: none was refused anything
    [server_log] = data_dir.rglob("nats-server.log")
    violations = [line for line in server_log.read_text().splitlines() if "Violation" in line]
    assert violations == [], violations[:5]

    # nothing left running: the demo endpoint's engine stopped with it
    assert _leftovers(data_dir, exclude_logs_under=data_dir / "runner") == []


def _leftovers(data_dir: Path, *, exclude_logs_under: Path) -> list[int]:
    """Processes still mentioning `data_dir`, each killed here (the test leaves nothing running).

    Returned: those whose output does not go to a log under `exclude_logs_under`. A runner's trial
    engine that was starting when the stack stopped can outlive it (the engine lifecycle does not
    stop an engine whose start is cancelled); that is the runner's and the engine's to fix, not
    the demo's, so it is killed but not counted here.
    """
    deadline = time.monotonic() + 20.0
    while processes_mentioning(str(data_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    counted = []
    for pid in processes_mentioning(str(data_dir)):
        try:
            log = os.readlink(f"/proc/{pid}/fd/1")
        except OSError:
            log = ""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not log.startswith(str(exclude_logs_under)):
            counted.append(pid)
    return counted


def test_bad_demo_options_are_one_line_errors(tmp_path: Path) -> None:
    short = run_cli("up", "--demo", "--duration", "5", "--data-dir", str(tmp_path))
    assert_one_line_error(short, "--duration must be at least 20 s")
    without_demo = run_cli("up", "--engine", "sim", "--data-dir", str(tmp_path))
    assert_one_line_error(without_demo, "options of --demo")


def test_an_interrupted_demo_says_so_and_exits_130(data_dir: Path) -> None:
    # PYTHONFAULTHANDLER: a SIGABRT makes it print every thread's stack (what a stop waits on)
    env = cli_env(PYTHONFAULTHANDLER="1")
    proc = start_evertune(
        "up", "--demo", "--engine", "sim", "--duration", "60", "--data-dir", str(data_dir), env=env
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:  # until the traffic is flowing
            lines.append(line)
            if "voice traffic through the gateway" in line:
                break
        else:
            pytest.fail("".join(lines[-30:]))
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # `evertune up` prints every thread's stack
            time.sleep(2.0)
            proc.kill()
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"still running {STOP_TIMEOUT_S:g} s after Ctrl-C:\n{out[-1500:]}\n{err[-8000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "evertune up --demo: interrupted before the report; nothing was written" in out
    # (an aiohttp session is sometimes left unclosed at this stop: logged, not yet fixed)
    assert "Traceback" not in err, err[-3000:]
    assert not list(data_dir.glob("demo/*/report.md"))
