"""`evertune bench gateway`: the TTFT the gateway adds, measured out of process.

Four kinds of process, none sharing an event loop: the gateway (`evertune run gateway`, as in
production, publishing telemetry to a scratch nats-server), alone on the first core this process
may use; a streaming upstream with a fixed TTFT (50 ms, then 40 chunks 20 ms apart) and the
open-loop load client (`gateway_load`), with the nats-server, on the other cores. Two gateways
run side by side, one on uvloop and one on asyncio's loop (`EVERTUNE_GATEWAY_EVENT_LOOP`); each
takes load only in its own rounds.

Load is open-loop: request i is sent at start + i / rate whatever happened to the others. The
headline rate keeps `CONCURRENCY` (200) streams open on average (rate = 200 / a stream's 0.85 s,
about 235 requests/s); the ladder replays multiples of it until the client itself falls behind
its schedule (its p99 send lag over `LAG_LIMIT_MS`, or failed requests). At each rate the rounds
go direct to the upstream, through the uvloop gateway and through the asyncio one, in an order
that rotates each repeat; every figure is a median over repeats of (through the gateway - direct
in the same repeat):

- `overhead_p50_ms`, `overhead_p99_ms`: client-observed TTFT percentiles, through minus direct;
- `itl_overhead_p99_ms`: p99 of the gaps between content chunks, through minus direct;
- `cpu_ms_per_1k_requests`: the gateway process's CPU time (user + system, from /proc) per 1,000
  requests, telemetry publishing included;
- `record_overhead_p50_ms` / `_p99_ms`: the gateway's own view (`ttft_ms - upstream_ttft_ms` of
  its telemetry records).

The headline keys are the headline rate's on the gateway's default loop; `by_loop` and `ladder`
hold the rest. Goals (issue 18): `overhead_p50_ms` <= 1.0 and `overhead_p99_ms` <= 5.0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from evertune.apps.benchmarks import Figures
from evertune.apps.benchmarks.interleave import rotated
from evertune.apps.benchmarks.scratch import ScratchBus, scratch_bus
from evertune.domain.model import ensure_model
from evertune.domain.percentiles import percentile
from evertune.infra.bus import Bucket
from evertune.infra.child_guard import guarded
from evertune.infra.nats_server import free_port
from evertune.infra.settings import SharedSettings
from evertune.v1 import endpoint_pb2, telemetry_pb2

CONCURRENCY = 200  #: streams open on average at the headline rate
TTFT_MS = 50.0  #: the upstream's time to first token
TOKENS = 40  #: text chunks per response
ITL_MS = 20.0  #: the upstream's gap between chunks
STREAM_S = (TTFT_MS + TOKENS * ITL_MS) / 1000.0  #: one answer's length, seconds
HEADLINE_RPS = CONCURRENCY / STREAM_S  #: the rate that keeps `CONCURRENCY` streams open
LAG_LIMIT_MS = 5.0  #: the client's p99 send lag past which it no longer keeps its schedule
LOOPS = ("uvloop", "asyncio")  #: the gateways' event loops, each its own process
DIRECT = "direct"  #: the rounds that skip the gateway
READY_TIMEOUT_S = 120.0  #: a gateway process's start, tokenizer load included


@dataclass(frozen=True)
class Plan:
    """How much one run measures."""

    ladder: tuple[float, ...]  #: rates replayed, multiples of `HEADLINE_RPS`, in order
    duration_s: float  #: seconds of open-loop load per round
    repeats: int  #: rounds per path at each rate


FULL = Plan(ladder=(0.25, 0.5, 1.0, 1.5, 2.0, 3.0), duration_s=8.0, repeats=3)
QUICK = Plan(ladder=(0.5, 1.0), duration_s=4.0, repeats=2)


@dataclass(frozen=True)
class RoundResult:
    """One round of the client against one path."""

    path: str  #: DIRECT, or the gateway's loop
    rate_rps: float  #: the scheduled rate
    repeat: int  #: repeat index at this rate
    client: dict[str, Any]  #: what `gateway_load client` printed
    cpu_ms: float  #: the path's gateway CPU time during the round (0 for DIRECT)


def split_cores(cores: Sequence[int]) -> tuple[list[int], list[int]]:
    """(the gateway's core, everyone else's): the first core alone for the gateway, the rest for
    the client, the upstream and NATS (all of them when there is only one)."""
    ordered = sorted(cores)
    return ordered[:1], ordered[1:] or ordered


def cpu_ms(pid: int) -> float:
    """CPU time (user + system) a process has used, ms, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of the line
    return ticks * 1000.0 / os.sysconf("SC_CLK_TCK")


async def _gateway(
    loop: str, bus: ScratchBus, *, cores: list[int], tokenizer_dir: Path
) -> tuple[asyncio.subprocess.Process, str]:
    """Start `evertune run gateway` on `loop`, pinned to `cores`; (process, base URL) once ready."""
    port = free_port()
    folder = bus.folder / f"gateway-{loop}"
    folder.mkdir()
    env = {
        **os.environ,
        "EVERTUNE_NATS_URL": bus.url,
        "EVERTUNE_DATA_DIR": str(folder),
        "EVERTUNE_GATEWAY_HOST": "127.0.0.1",
        "EVERTUNE_GATEWAY_PORT": str(port),
        "EVERTUNE_GATEWAY_EVENT_LOOP": loop,
        "EVERTUNE_GATEWAY_TOKENIZER_DIR": str(tokenizer_dir),
        "EVERTUNE_GATEWAY_PREFIX_SECRET": secrets.token_hex(32),
    }
    with (folder / "log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *guarded([sys.executable, "-m", "evertune", "run", "gateway"], cpu_cores=cores, env=env),
            env=env,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline and process.returncode is None:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url + "/ready") as response:
                    if response.status == 200:
                        return process, url
            await asyncio.sleep(0.2)
    tail = (folder / "log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"the {loop} gateway did not become ready: {tail}")


async def _client(url: str, model: str, rate_rps: float, duration_s: float) -> dict[str, Any]:
    """One open-loop round of the load client (its own process)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "evertune.apps.benchmarks.gateway_load",
        "client",
        url + "/v1/chat/completions",
        model,
        str(rate_rps),
        str(duration_s),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"the load client failed (exit {process.returncode})")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def _measure_rate(
    rate_rps: float, *, plan: Plan, upstream: str, gateways: dict[str, tuple[int, str]]
) -> list[RoundResult]:
    """Every path `plan.repeats` times at one rate, the order of paths rotating each repeat."""
    paths = [DIRECT, *gateways]
    out: list[RoundResult] = []
    for repeat in range(plan.repeats):
        for path in rotated(paths, repeat):
            if path == DIRECT:
                client = await _client(upstream, "bench", rate_rps, plan.duration_s)
                used = 0.0
            else:
                pid, url = gateways[path]
                before = cpu_ms(pid)
                client = await _client(url, f"bench-{path}", rate_rps, plan.duration_s)
                used = cpu_ms(pid) - before
            out.append(RoundResult(path=path, rate_rps=rate_rps, repeat=repeat, client=client, cpu_ms=used))
    return out


def _always(value: bytes) -> Callable[[bytes | None], bytes]:
    """A KV change that writes `value` whatever was there."""
    return lambda _: value


def lagged(rounds: Sequence[RoundResult]) -> bool:
    """Whether the client fell behind its schedule (or lost requests) in any of these rounds."""
    return any(r.client["lag_p99_ms"] > LAG_LIMIT_MS or r.client["failed"] > 0 for r in rounds)


def overheads(rounds: Sequence[RoundResult], loop: str) -> dict[str, float]:
    """`loop`'s figures at one rate: medians over repeats of (through the gateway - direct)."""
    p50: list[float] = []
    p99: list[float] = []
    itl: list[float] = []
    cpu: list[float] = []
    for repeat in sorted({r.repeat for r in rounds}):
        direct = next(r for r in rounds if r.repeat == repeat and r.path == DIRECT).client
        via_round = next(r for r in rounds if r.repeat == repeat and r.path == loop)
        via = via_round.client
        p50.append(percentile(via["ttft_ms"], 50) - percentile(direct["ttft_ms"], 50))
        p99.append(percentile(via["ttft_ms"], 99) - percentile(direct["ttft_ms"], 99))
        itl.append(via["gap_p99_ms"] - direct["gap_p99_ms"])
        served = via["requests"] - via["failed"]
        cpu.append(via_round.cpu_ms / max(served, 1) * 1000.0)
    return {
        "overhead_p50_ms": round(statistics.median(p50), 3),
        "overhead_p99_ms": round(statistics.median(p99), 3),
        "itl_overhead_p99_ms": round(statistics.median(itl), 3),
        "cpu_ms_per_1k_requests": round(statistics.median(cpu), 1),
    }


async def _records(
    bus: ScratchBus, loop: str, *, timeout_s: float = 10.0
) -> list[telemetry_pb2.RequestRecord]:
    """Every telemetry record the `loop` gateway published (its endpoint's subject)."""
    subject = f"evertune.telemetry.bench-{loop}"
    info = await bus.js.stream_info("TELEMETRY", subjects_filter=subject)
    expected = (info.state.subjects or {}).get(subject, 0)
    sub = await bus.js.subscribe(subject, ordered_consumer=True)
    records: list[telemetry_pb2.RequestRecord] = []
    deadline = time.monotonic() + timeout_s
    seen = 0
    try:
        while seen < expected and time.monotonic() < deadline:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except TimeoutError:
                continue
            seen += 1
            batch = telemetry_pb2.RequestRecordBatch()
            batch.ParseFromString(msg.data)
            records.extend(batch.records)
    finally:
        await sub.unsubscribe()
    return records


def record_overheads(records: Sequence[telemetry_pb2.RequestRecord]) -> dict[str, float]:
    """The gateway's own view of what it added: p50/p99 of `ttft_ms - upstream_ttft_ms`."""
    own = [r.ttft_ms - r.upstream_ttft_ms for r in records if r.upstream_ttft_ms > 0 and r.ttft_ms > 0]
    if not own:
        return {"record_overhead_p50_ms": 0.0, "record_overhead_p99_ms": 0.0, "records": 0}
    return {
        "record_overhead_p50_ms": round(percentile(own, 50), 3),
        "record_overhead_p99_ms": round(percentile(own, 99), 3),
        "records": len(own),
    }


async def run(quick: bool) -> Figures:
    from evertune.gateway import GatewaySettings  # a service, imported when run

    plan = QUICK if quick else FULL
    default_loop = GatewaySettings().event_loop
    gateway_cores, other_cores = split_cores(sorted(os.sched_getaffinity(0)))
    own_cores = os.sched_getaffinity(0)
    tokenizer_dir = await asyncio.to_thread(ensure_model, SharedSettings().data_dir.expanduser())
    os.sched_setaffinity(0, other_cores)  # NATS, the upstream and the clients inherit it
    started = time.monotonic()
    try:
        async with scratch_bus("evertune-bench-gateway") as bus:
            return await _run(plan, bus, gateway_cores, tokenizer_dir, default_loop, started)
    finally:
        os.sched_setaffinity(0, own_cores)


async def _run(
    plan: Plan,
    bus: ScratchBus,
    gateway_cores: list[int],
    tokenizer_dir: Path,
    default_loop: str,
    started: float,
) -> Figures:
    port = free_port()
    upstream = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "evertune.apps.benchmarks.gateway_load",
        "upstream",
        str(port),
        str(TTFT_MS),
        str(TOKENS),
        str(ITL_MS),
    )
    processes = [upstream]
    try:
        routes = await Bucket.open(bus.js, "routes")
        for name in ("bench", *(f"bench-{loop}" for loop in LOOPS)):
            route = endpoint_pb2.Route(deployment_id="d", upstream_url=f"http://127.0.0.1:{port}", weight=1)
            table = endpoint_pb2.RouteTable(endpoint=name, routes=[route]).SerializeToString()
            await routes.mutate(name, _always(table))
        gateways: dict[str, tuple[int, str]] = {}
        for loop in LOOPS:
            process, url = await _gateway(loop, bus, cores=gateway_cores, tokenizer_dir=tokenizer_dir)
            processes.append(process)
            gateways[loop] = (process.pid, url)
        ladder: list[dict[str, Any]] = []
        by_rate: dict[float, list[RoundResult]] = {}
        for multiple in plan.ladder:
            rate = round(HEADLINE_RPS * multiple, 1)
            rounds = await _measure_rate(
                rate, plan=plan, upstream=f"http://127.0.0.1:{port}", gateways=gateways
            )
            by_rate[multiple] = rounds
            ladder.append(
                {
                    "rate_rps": rate,
                    "streams": round(rate * STREAM_S),
                    "client_lag_p99_ms": round(max(r.client["lag_p99_ms"] for r in rounds), 2),
                    "client_lagged": lagged(rounds),
                    **{loop: overheads(rounds, loop) for loop in LOOPS},
                }
            )
            if lagged(rounds):
                break
        records = {loop: record_overheads(await _records(bus, loop)) for loop in LOOPS}
    finally:
        for process in processes:
            if process.returncode is None:
                process.terminate()
        for process in processes:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 20.0)
            if process.returncode is None:
                process.kill()
                await process.wait()
    headline = by_rate.get(1.0, [])
    steady = [row["rate_rps"] for row in ladder if not row["client_lagged"]]
    by_loop = {loop: {**overheads(headline, loop), **records[loop]} for loop in LOOPS} if headline else {}
    main = by_loop.get(default_loop, {})
    return {
        "benchmark": "gateway",
        "event_loop": default_loop,
        "concurrency": CONCURRENCY,
        "headline_rps": round(HEADLINE_RPS, 1),
        "headline_client_lagged": lagged(headline) if headline else True,
        "repeats": plan.repeats,
        "round_s": plan.duration_s,
        **main,
        "max_rps_before_client_lag": max(steady, default=0.0),
        "failed": sum(r.client["failed"] for rounds in by_rate.values() for r in rounds),
        "gateway_cores": gateway_cores,
        "by_loop": by_loop,
        "ladder": ladder,
        "wall_s": round(time.monotonic() - started, 1),
    }
