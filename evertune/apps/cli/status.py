"""`evertune status`: the running services and their state, from the NATS micro-service API."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path

from evertune.apps.cli.common import nats_url_for, shared_settings
from evertune.apps.services import SERVICE_NAMES
from evertune.errors import Unavailable
from evertune.infra.bus import connect
from evertune.infra.runtime.micro import InstanceStatus, discover


def status(*, data_dir: Path | None, nats_url: str | None, as_json: bool, wait_s: float) -> int:
    shared = shared_settings(data_dir, log_format="console")
    url = nats_url_for(shared, nats_url)
    found = asyncio.run(_discover(url, shared.connect_timeout_s, wait_s))
    if as_json:
        print(json.dumps({"nats_url": url, "services": [asdict(s) for s in found]}))
    else:
        _print_table(found)
    if not found:
        raise Unavailable(f"no evertune service answered on {url} within {wait_s:g} s")
    return 0


async def _discover(url: str, connect_timeout_s: float, wait_s: float) -> list[InstanceStatus]:
    nc = await connect(url, name="evertune-status", connect_timeout_s=connect_timeout_s)
    try:
        return await discover(nc, wait_s=wait_s)
    finally:
        await nc.close()


def _print_table(found: list[InstanceStatus]) -> None:
    rank = {name: i for i, name in enumerate(SERVICE_NAMES)}
    print(f"{'SERVICE':<12} {'STATE':<9} {'PID':<8} {'STARTED (UTC)':<24} DETAILS")
    for s in sorted(found, key=lambda s: (rank.get(s.name, 99), s.id)):
        details = " ".join(f"{k}={v}" for k, v in s.details.items() if v not in ({}, "", None))
        print(f"{s.name:<12} {s.state:<9} {s.pid:<8} {s.started:<24} {details}")
