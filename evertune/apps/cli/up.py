"""`evertune up`: embedded NATS, the store and every service in one process.

chDB allows one engine per process, so the embedded default runs all services that use the store
in this one process; in production each service runs alone (`evertune run`) against a NATS cluster
and a ClickHouse server.

`--demo` runs the closed-loop demo (`evertune.apps.demo`) against the stack once it is ready: the demo's
service settings are set where the environment does not set them, `--duration` is then the
traffic's length (startup not counted), and the stack stops after the report is written. The exit
status is 0 when every stage of the loop happened, 1 when one did not, 130 when a signal stopped
the demo before its report.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from rich.padding import Padding
from rich.table import Table

from evertune.apps.cli.common import Commands, add_data_dir_flag, shared_settings, stop_on_signals
from evertune.apps.cli.console import out_console, table
from evertune.apps.services import SERVICE_NAMES, create_service
from evertune.errors import EvertuneError, InvalidArgument
from evertune.infra.data_dir import DataDirLock, Runtime, remove_runtime, write_runtime
from evertune.infra.nats_auth import EmbeddedCredentials, generate
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime import Service
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings

if TYPE_CHECKING:
    from evertune.apps.demo.choices import DemoOptions

#: Exit status of a demo stopped by a signal before its report (the shell's 128 + SIGINT).
INTERRUPTED = 130


def add_commands(commands: Commands) -> None:
    """`evertune up`."""
    parser = commands.add_parser("up", help="start NATS, the store and every service in one process")
    add_data_dir_flag(parser)
    parser.add_argument("--duration", type=float, default=None, help="stop by itself after this many seconds")
    parser.add_argument("--demo", action="store_true", help="run the demo (what `make demo` runs)")
    parser.add_argument("--engine", choices=("vllm", "sim"), default="vllm", help="demo engine (sim: fast)")
    parser.add_argument("--no-drift", action="store_true", help="demo: keep the traffic as it is (no shift)")
    parser.add_argument("--peak-calls", type=float, default=None, help="demo: voice calls/s before the shift")
    parser.set_defaults(func=up_command)


def up_command(args: argparse.Namespace) -> int:
    return up(
        data_dir=args.data_dir,
        duration_s=args.duration,
        demo=args.demo,
        engine=args.engine,
        drift=not args.no_drift,
        peak_calls_per_s=args.peak_calls,
    )


def up(
    *,
    data_dir: Path | None,
    duration_s: float | None,
    demo: bool,
    engine: str = "vllm",
    drift: bool = True,
    peak_calls_per_s: float | None = None,
) -> int:
    # the demo imports torch (its model): here, so that the other commands start without it
    from evertune.apps.demo.choices import DEFAULT_DURATION_S, ENGINE_DEFAULTS, DemoOptions, demo_environment
    from evertune.apps.demo.driver import Engine

    # `kill -USR1 <pid>` prints every thread's stack to stderr: what a stop that hangs waits on
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    options: DemoOptions | None = None
    if not demo and (engine != "vllm" or not drift or peak_calls_per_s is not None):
        raise InvalidArgument("--engine, --no-drift and --peak-calls are options of --demo")
    if demo:
        known = ENGINE_DEFAULTS.get(cast(Engine, engine))  # an unknown engine: DemoOptions says so
        if duration_s is None:
            duration_s = known.duration_s if known is not None else DEFAULT_DURATION_S
        options = DemoOptions(
            engine=cast(Engine, engine),
            duration_s=duration_s,
            drift=drift,
            peak_calls_per_s=peak_calls_per_s,
        )
        os.environ.setdefault("EVERTUNE_LOG_LEVEL", "error")
        for key, value in demo_environment(options).items():
            os.environ.setdefault(key, value)
    shared = shared_settings(data_dir)
    folder = shared.data_dir.expanduser()
    # What this command starts reads the same data dir as its services, --data-dir included: the
    # engines keep EVERTUNE_DATA_DIR (`ENGINE_KEPT_SETTINGS`) and the sim engine's calibration is
    # read from it (`default_data_dir()`), which was ~/.evertune under a --data-dir demo.
    os.environ["EVERTUNE_DATA_DIR"] = str(folder)
    lock = DataDirLock(folder)
    lock.acquire()
    try:
        return asyncio.run(_up(shared, duration_s=None if demo else duration_s, demo=options))
    finally:
        remove_runtime(lock.data_dir)
        lock.release()


async def _up(shared: SharedSettings, *, duration_s: float | None, demo: DemoOptions | None) -> int:
    started = time.monotonic()
    stop = asyncio.Event()
    demo_task: asyncio.Task[int] | None = None
    #: a signal came before the demo had finished (its report then is not written, or not whole)
    interrupted = False

    def on_signal() -> None:
        nonlocal interrupted
        interrupted = interrupted or (demo is not None and (demo_task is None or not demo_task.done()))

    stop_on_signals(stop, on_signal=on_signal)
    data_dir = shared.data_dir.expanduser()
    services = [create_service(name) for name in SERVICE_NAMES]
    nats: EmbeddedNats | None = None
    nats_url = shared.nats_url
    #: the embedded server's users: each service logs in as its own, the CLI as the admin
    credentials: EmbeddedCredentials | None = None
    if not nats_url:
        credentials = generate(data_dir / "nats")
        nats = EmbeddedNats(data_dir / "nats", config=credentials.config_file)
        await nats.start()
        nats_url = nats.url
    #: the URL the CLI and the demo use: the admin's credentials in it (runtime.json is 0600)
    admin_url = credentials.admin_url(nats_url) if credentials is not None else nats_url

    def ready(running: Sequence[Service]) -> None:
        listen = {s.name: ", ".join(f"{k} {v}" for k, v in s.listen().items()) for s in running}
        write_runtime(
            data_dir,
            Runtime(
                pid=os.getpid(),
                nats_url=admin_url,
                clickhouse_url=shared.store_url,
                started_at=time.time(),
                listen={k: v for k, v in listen.items() if v},
                metrics={s.name: s.metrics_url() for s in running if s.metrics_url()},
            ),
        )
        parts = [
            ("nats", f"{nats_url}{' (embedded)' if nats else ''}", ""),
            ("clickhouse", shared.store_url, ""),
            *((name, "running", where) for name, where in listen.items()),
        ]
        out = out_console()
        out.print(f"evertune up: data dir {data_dir}")
        out.print(Padding(ready_table(parts), (0, 0, 0, 2), expand=False))
        out.print(f"ready in {time.monotonic() - started:.1f} s; Ctrl-C stops")
        if demo is not None:
            nonlocal demo_task
            demo_task = asyncio.get_running_loop().create_task(
                _run_demo(demo, shared=shared, nats_url=admin_url, running=running, stop=stop)
            )

    timer = asyncio.get_running_loop().call_later(duration_s, stop.set) if duration_s else None
    code = 0
    try:
        await host_services(
            services,
            shared=shared,
            nats_url=nats_url,
            stop=stop,
            on_ready=ready,
            auth=credentials.admin if credentials is not None else None,
            service_auth=credentials.services if credentials is not None else None,
        )
    finally:
        if timer is not None:
            timer.cancel()
        if demo_task is not None:
            if not demo_task.done():  # the demo stops where it is, without its report
                demo_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                code = await demo_task
        if interrupted:
            print("evertune up --demo: interrupted before the report; nothing was written", flush=True)
            code = INTERRUPTED
        if nats is not None:
            try:
                await nats.stop()
            except Exception as err:  # its process may be left running: say so
                print(f"evertune up: the embedded NATS did not stop: {err!r}", file=sys.stderr, flush=True)
    print("evertune up: stopped", flush=True)
    return code


def ready_table(parts: Sequence[tuple[str, str, str]]) -> Table:
    """What `evertune up` started: (part, what or state, where it listens), one row each."""
    grid = table("part", "state", "listens")
    grid.show_header = False
    for row in parts:
        grid.add_row(*row)
    return grid


async def _run_demo(
    options: DemoOptions,
    *,
    shared: SharedSettings,
    nats_url: str,
    running: Sequence[Service],
    stop: asyncio.Event,
) -> int:
    """The demo against the ready stack; sets `stop` when done. 0 when it ran to its report with
    every stage of the loop, 1 otherwise (the missing stages are named on the terminal)."""
    from evertune.apps.demo.run import missing_stages, run_demo

    listen = {s.name: s.listen() for s in running}
    try:
        run = await run_demo(
            options,
            data_dir=shared.data_dir.expanduser(),
            nats_url=nats_url,
            store_url=shared.store_url,
            database=shared.clickhouse_database,
            gateway=listen.get("gateway", {}).get("http", ""),
            deployer=listen.get("deployer", {}).get("grpc", ""),
        )
        return 1 if missing_stages(run, options) else 0
    except EvertuneError as err:
        print(f"evertune up --demo: {err}", flush=True)
        return 1
    finally:
        stop.set()
