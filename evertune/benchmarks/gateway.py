"""`evertune bench gateway`: what the gateway adds to TTFT at 200 concurrent streams.

An upstream with a fixed TTFT (50 ms, then 40 chunks 20 ms apart) and a load client each run in
their own process; the gateway runs in this one, on the embedded nats-server, publishing telemetry
as in production. The client keeps 200 streams open, each sending its next request when the last
one ended (about 230 requests/s); rounds alternate between the upstream called directly and through
the gateway; `overhead_p50_ms` / `overhead_p99_ms` are the differences of the TTFT percentiles the client
saw, and `record_overhead_*` the gateway's own view per request (`ttft_ms - upstream_ttft_ms`).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys

from evertune.benchmarks import Figures
from evertune.benchmarks.scratch import scratch_bus
from evertune.bus import Bucket
from evertune.nats_server import free_port
from evertune.replay.percentiles import percentile
from evertune.runtime import ServiceContext
from evertune.settings import SharedSettings
from evertune.v1 import endpoint_pb2, telemetry_pb2

CONCURRENCY = 200  #: simultaneous streams per round
TTFT_MS = 50  #: the upstream's time to first token
TOKENS = 40  #: text chunks per response
ITL_MS = 20  #: the upstream's gap between chunks

UPSTREAM = """
import asyncio, json, sys
from aiohttp import web
async def chat(request):
    await request.read()
    r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await r.prepare(request)
    await asyncio.sleep(%(ttft)f)
    for i in range(%(tokens)d):
        c = {"choices": [{"index": 0, "delta": {"content": "t%%d " %% i}}]}
        await r.write(("data: " + json.dumps(c) + "\\n\\n").encode())
        await asyncio.sleep(%(itl)f)
    u = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": %(tokens)d}}
    await r.write(("data: " + json.dumps(u) + "\\n\\ndata: [DONE]\\n\\n").encode())
    await r.write_eof()
    return r
app = web.Application()
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""

CLIENT = """
import asyncio, json, random, sys, time
import aiohttp
async def one(session, url, model):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    sent = time.perf_counter()
    ttft = -1.0
    async with session.post(url, json=body) as r:
        async for line in r.content:
            if ttft < 0 and b'"content"' in line:
                ttft = (time.perf_counter() - sent) * 1000.0
    return ttft
async def worker(session, url, model, n, spread):
    await asyncio.sleep(random.random() * spread)
    return [await one(session, url, model) for _ in range(n)]
async def main():
    url, model = sys.argv[1], sys.argv[2]
    streams, n, spread = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        await one(s, url, model)
        done = await asyncio.gather(*(worker(s, url, model, n, spread) for _ in range(streams)))
    print(json.dumps([x for w in done for x in w[1:]]))
asyncio.run(main())
"""


async def _round(url: str, model: str, per_stream: int) -> list[float]:
    """TTFTs of `CONCURRENCY` streams kept open back to back (`per_stream` requests each, first
    one of each dropped as warm-up), starts spread over one stream's duration."""
    spread = (TTFT_MS + TOKENS * ITL_MS) / 1000.0
    args = [url, model, str(CONCURRENCY), str(per_stream), str(spread)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, *args, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return [float(x) for x in json.loads(out)]


async def run(quick: bool) -> Figures:
    from evertune.gateway import GatewayService, GatewaySettings  # a service, imported when run
    from evertune.gateway.publisher import Pending

    rounds, per_stream = (1, 4) if quick else (3, 8)
    port = free_port()
    upstream = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        UPSTREAM % {"ttft": TTFT_MS / 1000.0, "itl": ITL_MS / 1000.0, "tokens": TOKENS},
        str(port),
    )
    upstream_url = f"http://127.0.0.1:{port}"
    async with scratch_bus("evertune-bench-gateway") as bus:
        js = bus.js
        gateway = GatewayService(GatewaySettings(port=0, spool_path=bus.folder / "spool.bin"))
        try:
            table = endpoint_pb2.RouteTable(
                endpoint="bench",
                routes=[endpoint_pb2.Route(deployment_id="d", upstream_url=upstream_url, weight=1)],
            )
            await (await Bucket.open(js, "routes")).mutate("bench", lambda _: table.SerializeToString())
            await gateway.start(
                ServiceContext(shared=SharedSettings(data_dir=bus.folder), nc=bus.nc, js=js, store=None)
            )
            assert gateway.proxy is not None and gateway.publisher is not None
            records: list[telemetry_pb2.RequestRecord] = []
            offer = gateway.publisher.offer

            def capture(item: Pending) -> None:
                records.append(item.record)
                offer(item)

            gateway.proxy.offer = capture
            for _ in range(50):  # wait for the upstream process
                try:
                    await asyncio.open_connection("127.0.0.1", port)
                    break
                except OSError:
                    await asyncio.sleep(0.1)
            direct: list[float] = []
            via: list[float] = []
            gateway_url = f"http://127.0.0.1:{gateway.port}/v1/chat/completions"
            for _ in range(rounds):
                direct += await _round(upstream_url + "/v1/chat/completions", "bench", per_stream)
                via += await _round(gateway_url, "bench", per_stream)
        finally:
            await gateway.stop(5.0)
            upstream.terminate()
            await upstream.wait()
    own = [r.ttft_ms - r.upstream_ttft_ms for r in records if r.upstream_ttft_ms > 0]
    return {
        "benchmark": "gateway",
        "concurrency": CONCURRENCY,
        "rounds": rounds,
        "direct_ttft_p50_ms": round(percentile(direct, 50), 2),
        "gateway_ttft_p50_ms": round(percentile(via, 50), 2),
        "overhead_p50_ms": round(percentile(via, 50) - percentile(direct, 50), 2),
        "overhead_p99_ms": round(percentile(via, 99) - percentile(direct, 99), 2),
        "record_overhead_p50_ms": round(statistics.median(own), 2) if own else 0.0,
        "record_overhead_p99_ms": round(percentile(own, 99), 2) if own else 0.0,
        "failed": sum(1 for x in direct + via if x < 0),
    }
