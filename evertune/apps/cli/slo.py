"""`evertune slo status`: p50/p99 TTFT against the SLO, attainment and burn rates, read live from the
running sla-monitor(s) over the NATS micro-service API (the same STATS round as `evertune status`).

One row per endpoint (deployment `-`, the endpoint as a whole) and per deployment of it. Burn rates
are shown per rule as `long/short`; a `!` marks a rule with an open incident on that row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from rich.console import Console
from rich.table import Table

from evertune.apps.cli.common import (
    Commands,
    add_data_dir_flag,
    nats_url_for,
    shared_settings,
    stop_on_signals,
)
from evertune.apps.cli.console import out_console, table
from evertune.errors import InvalidArgument, NotFound, Unavailable
from evertune.infra.bus import connect
from evertune.infra.runtime.micro import InstanceStatus, discover

#: micro-service name of the sla-monitor.
SLA_MONITOR = "sla-monitor"


@dataclass(frozen=True)
class SloRow:
    """One line of the table."""

    endpoint: str  #: endpoint name
    deployment: str  #: deployment id; "" for the endpoint as a whole
    requests: int  #: requests in the status window
    ttft_p50_ms: float | None  #: median TTFT over the status window, ms
    ttft_p99_ms: float | None  #: 99th-percentile TTFT, ms
    ttft_target_ms: float | None  #: the SLO's per-request TTFT target, ms
    attainment: float | None  #: share of good requests over the status window
    attainment_target: float | None  #: the SLO's attainment target
    slo_source: str  #: "endpoints" (the deployer's registry) or "default" (the monitor's settings)
    window_s: float  #: status window, seconds
    burn_rates: dict[str, dict[str, Any]] = field(default_factory=dict)  #: rule -> long, short, ...


def rows_from_status(instances: list[InstanceStatus], endpoint: str | None = None) -> list[SloRow]:
    """The table's rows from the sla-monitor instances' status details (optionally one endpoint)."""
    rows: list[SloRow] = []
    for instance in instances:
        details = instance.details
        window_s = float(details.get("window_s", 0.0))
        for name, entry in sorted((details.get("endpoints") or {}).items()):
            if endpoint is not None and name != endpoint:
                continue
            slo = entry.get("slo") or {}
            scopes = [("", entry), *sorted((entry.get("deployments") or {}).items())]
            for deployment, figures in scopes:
                rows.append(
                    SloRow(
                        endpoint=name,
                        deployment=deployment,
                        requests=int(figures.get("requests") or 0),
                        ttft_p50_ms=figures.get("ttft_p50_ms"),
                        ttft_p99_ms=figures.get("ttft_p99_ms"),
                        ttft_target_ms=slo.get("ttft_p99_ms"),
                        attainment=figures.get("attainment"),
                        attainment_target=slo.get("attainment_target"),
                        slo_source=str(slo.get("source", "")),
                        window_s=window_s,
                        burn_rates=dict(figures.get("burn_rates") or {}),
                    )
                )
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def burn_text(burn: dict[str, Any] | None) -> str:
    """One rule's burn rates as `long/short`, `!` when its incident is open; "-" when none."""
    if burn is None:
        return "-"
    return f"{burn.get('long', 0.0):.2f}/{burn.get('short', 0.0):.2f}{'!' if burn.get('open') else ''}"


def table_rows(rows: list[SloRow]) -> tuple[list[str], list[list[str]]]:
    """The table's header and cells: one burn-rate column per rule any row has."""
    rules: list[str] = []
    for row in rows:
        rules += [r for r in row.burn_rates if r not in rules]
    head = ["ENDPOINT", "DEPLOYMENT", "REQS", "P50_MS", "P99_MS", "TARGET_MS", "ATTAIN", "TARGET", *rules]
    cells = [
        [
            row.endpoint,
            row.deployment or "-",
            str(row.requests),
            _ms(row.ttft_p50_ms),
            _ms(row.ttft_p99_ms),
            _ms(row.ttft_target_ms),
            _share(row.attainment),
            _share(row.attainment_target),
            *(burn_text(row.burn_rates.get(rule)) for rule in rules),
        ]
        for row in rows
    ]
    return head, cells


def slo_table(rows: list[SloRow]) -> Table:
    """The rows as a table (one burn-rate column per rule)."""
    head, cells = table_rows(rows)
    grid = table(*head, right=tuple(range(2, len(head))))
    for line in cells:
        grid.add_row(*line)
    return grid


async def _rows(nc: Client, *, url: str, endpoint: str | None, wait_s: float) -> list[SloRow]:
    found = [s for s in await discover(nc, wait_s=wait_s) if s.name == SLA_MONITOR]
    if not found:
        raise Unavailable(f"no sla-monitor answered on {url} within {wait_s:g} s")
    return rows_from_status(found, endpoint)


def _print(
    rows: list[SloRow], *, url: str, endpoint: str | None, as_json: bool, watching: bool, out: Console
) -> None:
    if as_json:
        print(
            json.dumps({"nats_url": url, "time": time.time(), "rows": [asdict(r) for r in rows]}), flush=True
        )
        return
    if watching:
        out.clear()  # on a terminal only: elsewhere each round follows the last
    window = f" (window {rows[0].window_s:g} s)" if rows else ""
    out.print(
        f"{time.strftime('%H:%M:%S')} SLO status from {url}{window}; burn rate long/short, ! = open incident"
    )
    if rows:
        out.print(slo_table(rows))
    else:
        what = f"endpoint {endpoint!r}" if endpoint else "any endpoint"
        out.print(f"(no traffic seen for {what} yet)")
    out.file.flush()


def add_commands(commands: Commands) -> None:
    """`evertune slo status`."""
    slo = commands.add_parser("slo", help="SLO figures from the running sla-monitor")
    slo_commands = slo.add_subparsers(dest="slo_command", required=True, metavar="COMMAND")
    parser = slo_commands.add_parser(
        "status", help="p50/p99 TTFT vs SLO, attainment and burn rates per endpoint and deployment"
    )
    add_data_dir_flag(parser)
    parser.add_argument("--nats-url", default=None, help="ask this NATS instead of the data dir's")
    parser.add_argument("--endpoint", default=None, help="only this endpoint")
    parser.add_argument("--json", action="store_true", help="one JSON object (per refresh)")
    parser.add_argument(
        "--watch", type=float, default=None, metavar="SECONDS", help="refresh every SECONDS until Ctrl-C"
    )
    parser.add_argument("--wait", type=float, default=1.0, help="seconds to wait for answers (default 1)")
    parser.set_defaults(func=slo_status_command)


def slo_status_command(args: argparse.Namespace) -> int:
    return slo_status(
        data_dir=args.data_dir,
        nats_url=args.nats_url,
        endpoint=args.endpoint,
        as_json=args.json,
        watch_s=args.watch,
        wait_s=args.wait,
    )


def slo_status(
    *,
    data_dir: Path | None,
    nats_url: str | None,
    endpoint: str | None,
    as_json: bool,
    watch_s: float | None,
    wait_s: float,
) -> int:
    """Print the table once (or every `watch_s` seconds until interrupted)."""
    if watch_s is not None and watch_s <= 0:
        raise InvalidArgument(f"--watch must be > 0 seconds, got {watch_s:g}")
    if wait_s <= 0:
        raise InvalidArgument(f"--wait must be > 0 seconds, got {wait_s:g}")
    shared = shared_settings(data_dir, log_format="console")
    url = nats_url_for(shared, nats_url)
    out = out_console()

    async def main() -> int:
        stop = asyncio.Event()
        if watch_s is not None:
            stop_on_signals(stop)
        nc = await connect(
            url,
            name="evertune-slo-status",
            connect_timeout_s=shared.connect_timeout_s,
            auth=shared.nats_auth(),
        )
        try:
            while True:
                rows = await _rows(nc, url=url, endpoint=endpoint, wait_s=wait_s)
                if watch_s is None and endpoint is not None and not rows:
                    raise NotFound(f"the sla-monitor has seen no traffic for endpoint {endpoint!r}")
                _print(
                    rows,
                    url=url,
                    endpoint=endpoint,
                    as_json=as_json,
                    watching=watch_s is not None,
                    out=out,
                )
                if watch_s is None:
                    return 0
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), watch_s)
                if stop.is_set():
                    return 0
        finally:
            await nc.close()

    return asyncio.run(main())
