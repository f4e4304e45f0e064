"""`run_demo`: the demo from options to report, against a stack that is up (see `evertune up --demo`)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from evertune.apps.cli.console import out_console
from evertune.apps.demo.choices import DemoOptions, endpoint_plan, sizer, traffic_plan
from evertune.apps.demo.driver import Demo, DemoRun, Printer, Where
from evertune.apps.demo.panel import stage_verdicts
from evertune.apps.demo.report import write_report
from evertune.apps.services import SERVICE_NAMES, create_service
from evertune.errors import Unavailable
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime.host import hosted
from evertune.infra.settings import SharedSettings, load_settings


def where_of(
    *, data_dir: Path, nats_url: str, store_url: str, database: str, gateway: str, deployer: str
) -> Where:
    """Where the stack listens; a service that does not listen is a one-line error."""
    if not gateway:
        raise Unavailable("the gateway is not listening: the demo needs its HTTP port")
    if not deployer:
        raise Unavailable("the deployer is not listening: the demo needs its gRPC port")
    return Where(
        nats_url=nats_url,
        store_url=store_url,
        database=database,
        gateway_url=f"http://{gateway}",
        deployer_address=deployer,
        data_dir=data_dir,
    )


async def run_demo(
    options: DemoOptions,
    *,
    data_dir: Path,
    nats_url: str,
    store_url: str,
    database: str,
    gateway: str,
    deployer: str,
    out: Printer | None = None,
) -> DemoRun:
    """Run the demo and write its report; returns what it observed. `out`: where it writes for
    people (default: a rich console on stdout)."""
    out = out or out_console().print
    where = where_of(
        data_dir=data_dir,
        nats_url=nats_url,
        store_url=store_url,
        database=database,
        gateway=gateway,
        deployer=deployer,
    )
    demo = Demo(
        where=where,
        endpoint=endpoint_plan(options),
        traffic=traffic_plan(options),
        profile_at_s=options.profile_at_s,
        settle_s=options.settle_s,
        sizer=sizer(options),
        out=out,
    )
    run = await demo()
    report_dir = options.report_dir or data_dir / "demo" / time.strftime("%Y%m%d-%H%M%S")
    path = write_report(run, report_dir)
    missing = missing_stages(run, options)
    out(f"demo: report written to {path}")
    if missing:
        out(f"demo: stages of the loop that did not happen in this run: {', '.join(missing)}")
    lost = "not counted" if run.lost_records is None else str(run.lost_records)
    out(f"demo: {run.sent} requests sent, {run.telemetry_rows} telemetry rows, lost records {lost}")
    return run


def missing_stages(run: DemoRun, options: DemoOptions) -> list[str]:
    """Stages of the loop that did not happen in `run` (drift is not expected with `--no-drift`)."""
    return [
        v.stage
        for v in stage_verdicts(run.loop_events)
        if not v.happened and (options.drift or v.stage != "drift")
    ]


@contextlib.asynccontextmanager
async def embedded_stack(data_dir: Path) -> AsyncIterator[Where]:
    """The whole stack in this process on `data_dir` (embedded NATS, chDB, every service), as
    `evertune up` runs it; yields where it listens. Services read their settings from the
    environment when they are built here."""
    shared = load_settings(SharedSettings, data_dir=data_dir)
    nats = EmbeddedNats(data_dir / "nats")
    await nats.start()
    services = [create_service(name) for name in SERVICE_NAMES]
    try:
        async with hosted(services, shared=shared, nats_url=nats.url):
            listen = {s.name: s.listen() for s in services}
            yield where_of(
                data_dir=data_dir,
                nats_url=nats.url,
                store_url=shared.store_url,
                database=shared.clickhouse_database,
                gateway=listen.get("gateway", {}).get("http", ""),
                deployer=listen.get("deployer", {}).get("grpc", ""),
            )
    finally:
        try:
            await nats.stop()
        except Exception as err:  # its process may be left running: say so
            print(f"evertune demo: the embedded NATS did not stop: {err!r}", file=sys.stderr, flush=True)
