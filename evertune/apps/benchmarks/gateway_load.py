"""The processes around the gateway in `evertune bench gateway`: a streaming upstream with known
delays, and an open-loop load client. Each runs as its own process, so neither shares the
gateway's event loop or core:

    python -m evertune.apps.benchmarks.gateway_load upstream PORT TTFT_MS TOKENS ITL_MS
    python -m evertune.apps.benchmarks.gateway_load client URL MODEL RATE DURATION_S

The upstream answers `POST /v1/chat/completions` with a stream: the first chunk `TTFT_MS` after
the request, then one chunk every `ITL_MS` (`TOKENS` in all), a usage chunk and `[DONE]`.

The client is open-loop: request i is due at `start + i / RATE`, whatever the answers before it
did, for `DURATION_S`. It prints one JSON object: each request's TTFT (ms, from its actual send),
how late each was sent against its schedule (`lag_ms`: the client falling behind shows here, not
as gateway overhead), the p50/p99 of the gaps between content chunks, and how many failed.
Both use uvloop when it is installed (the faster the fixtures, the higher the load they drive).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from typing import Any

import aiohttp
from aiohttp import web

from evertune.domain.percentiles import percentile

#: Requests sent together before the schedule starts (connections opened, code warm).
WARM_REQUESTS = 20


def _upstream_app(*, ttft_s: float, tokens: int, itl_s: float) -> web.Application:
    usage = {"prompt_tokens": 10, "completion_tokens": tokens}
    tail = b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n"
    chunks = [
        b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}).encode() + b"\n\n"
        for i in range(tokens)
    ]

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        arrived = time.perf_counter()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, chunk in enumerate(chunks):  # on an absolute schedule: sleeps' overshoot does not add up
            due = arrived + ttft_s + i * itl_s
            # in whole milliseconds, rounded up, and again while early: uvloop's timers run on a
            # millisecond clock read at the start of a loop turn, so one can fire a fraction of a
            # millisecond before `due` (a fresh-clone CI measured 29.74 ms for a 30 ms upstream)
            for _ in range(4):
                delay = due - time.perf_counter()
                if delay <= 0:
                    break
                await asyncio.sleep(math.ceil(delay * 1000.0) / 1000.0)
            await response.write(chunk)
        await response.write(tail)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, due: float) -> dict[str, Any]:
    """One streamed request: its send lag against `due`, TTFT and chunk gaps (perf_counter based)."""
    sent = time.perf_counter()
    first = last = 0.0
    gaps: list[float] = []
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
            if response.status != 200:
                return {"ok": False}
            async for line in response.content:
                if b'"content"' not in line:
                    continue
                now = time.perf_counter()
                if first:
                    gaps.append((now - last) * 1000.0)
                else:
                    first = now
                last = now
    except (aiohttp.ClientError, OSError):
        return {"ok": False}
    if not first:
        return {"ok": False}
    return {"ok": True, "lag_ms": (sent - due) * 1000.0, "ttft_ms": (first - sent) * 1000.0, "gaps": gaps}


async def _client(url: str, model: str, rate: float, duration_s: float) -> dict[str, Any]:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ).encode()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        warm = time.perf_counter()  # all at once: a stream lasts the upstream's whole answer
        await asyncio.gather(*(_one(session, url, body, warm) for _ in range(WARM_REQUESTS)))
        start = time.perf_counter() + 0.05
        count = max(1, int(rate * duration_s))
        tasks = []
        for i in range(count):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, url, body, due)))
        results = await asyncio.gather(*tasks)
    done = [r for r in results if r["ok"]]
    gaps = [g for r in done for g in r["gaps"]] or [0.0]  # JSON has no NaN: nothing measured is 0
    lags = [r["lag_ms"] for r in done] or [0.0]
    return {
        "requests": count,
        "failed": count - len(done),
        "ttft_ms": [r["ttft_ms"] for r in done],
        "lag_p99_ms": percentile(lags, 99),
        "gap_p50_ms": percentile(gaps, 50),
        "gap_p99_ms": percentile(gaps, 99),
    }


def _run(main: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def main(argv: list[str]) -> None:
    role, *args = argv
    if role == "upstream":
        port, ttft_ms, tokens, itl_ms = int(args[0]), float(args[1]), int(args[2]), float(args[3])
        app = _upstream_app(ttft_s=ttft_ms / 1000.0, tokens=tokens, itl_s=itl_ms / 1000.0)
        _run(_serve(app, port))
    elif role == "client":
        url, model, rate, duration_s = args[0], args[1], float(args[2]), float(args[3])
        print(json.dumps(_run(_client(url, model, rate, duration_s))))
    else:
        raise SystemExit(f"unknown role {role!r}: upstream or client")


async def _serve(app: web.Application, port: int) -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()  # until the bench terminates the process


if __name__ == "__main__":
    main(sys.argv[1:])
