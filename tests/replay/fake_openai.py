"""A small OpenAI-compatible streaming server with known delays, for the replay tests.

Run as a script (`python fake_openai.py --port N`) in its own process, so its timing does not share
the test's event loop. Behaviour per request comes from the `X-Fake` header, comma-separated
`key=value`s (defaults in brackets):

    ttft_ms      delay from the request's arrival to the first text chunk [20]
    itl_ms       delay between text chunks [5]
    tokens       text chunks to send [the request's max_tokens]
    status       answer this HTTP status with a JSON error instead of a stream [200]
    drop_after   cut the connection after this many text chunks [never]
    no_done      1: end the stream cleanly but without `data: [DONE]`
    error_after  send an in-stream `{"error": ...}` payload after this many text chunks [never]
    crlf         1: end SSE lines with CRLF, and split each event across two writes
    whole        1: answer one JSON body (a non-streamed completion) after ttft_ms

Chunks are due on an absolute schedule (arrival + ttft + i * itl). asyncio.sleep overshoots, so the
server records what it actually did: per `X-Request-Id`, the time from the handler's start to the
write of each text chunk. `GET /fixture/truth` returns them, with the request's wall-clock arrival,
`max_tokens` and count of chat messages: `{id: {"ttft_ms": x, "gaps_ms": [...], "arrived_at": t,
"max_tokens": n, "messages": m}}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from aiohttp import web

MODELS = ["fake", "fake-2"]
TRUTH: web.AppKey[dict[str, dict[str, Any]]] = web.AppKey("truth", dict)


def _settings(request: web.Request) -> dict[str, float]:
    settings: dict[str, float] = {}
    for item in request.headers.get("X-Fake", "").split(","):
        key, _, value = item.strip().partition("=")
        if key:
            settings[key] = float(value)
    return settings


async def models(request: web.Request) -> web.Response:
    data = [{"id": name, "object": "model", "owned_by": "evertune-tests"} for name in MODELS]
    return web.json_response({"object": "list", "data": data})


async def truth(request: web.Request) -> web.Response:
    return web.json_response(request.app[TRUTH])


def _chunk(api: str, text: str | None, *, role: bool = False) -> dict[str, Any]:
    if api == "chat":
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
        return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    return {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": text}]}


async def stream(request: web.Request, api: str) -> web.StreamResponse:
    arrived = time.perf_counter()
    settings = _settings(request)
    body = await request.json()
    request_id = request.headers.get("X-Request-Id", "")
    status = int(settings.get("status", 200))
    if status != 200:
        error = {"error": {"message": "fixture says so", "type": "fixture", "code": status}}
        return web.json_response(error, status=status)
    tokens = int(settings.get("tokens", body.get("max_tokens", 16)))
    ttft_s = settings.get("ttft_ms", 20.0) / 1000.0
    if settings.get("whole"):
        return await _whole(api, body, tokens=tokens, delay_s=ttft_s)
    itl_s = settings.get("itl_ms", 5.0) / 1000.0
    drop_after = int(settings.get("drop_after", -1))
    error_after = int(settings.get("error_after", -1))
    newline = "\r\n" if settings.get("crlf") else "\n"
    writes: list[float] = []
    gaps_ms: list[float] = []
    record: dict[str, Any] = {
        "ttft_ms": None,
        "gaps_ms": gaps_ms,
        "arrived_at": time.time(),
        "max_tokens": body.get("max_tokens"),
        "messages": len(body.get("messages", [])),
    }
    request.app[TRUTH][request_id] = record

    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(payload: str) -> None:
        event = f"data: {payload}{newline}{newline}".encode()
        if settings.get("crlf"):
            await response.write(event[:7])
            await response.write(event[7:])
        else:
            await response.write(event)

    if api == "chat":
        await send(json.dumps(_chunk(api, None, role=True)))
    for i in range(tokens):
        if i == error_after:
            await send(json.dumps({"error": {"message": "fixture error in stream", "code": 500}}))
            break
        if i == drop_after:
            assert request.transport is not None
            request.transport.close()
            return response
        delay = arrived + ttft_s + i * itl_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        writes.append(time.perf_counter())
        await send(json.dumps(_chunk(api, f"t{i} ")))
        if i == 0:
            record["ttft_ms"] = (writes[0] - arrived) * 1000.0
        else:
            gaps_ms.append((writes[-1] - writes[-2]) * 1000.0)
    prompt = body.get("prompt") or body.get("messages") or ""
    usage = {"prompt_tokens": len(json.dumps(prompt)) // 4, "completion_tokens": len(writes)}
    await send(json.dumps({"id": "x", "object": "chunk", "choices": [], "usage": usage}))
    if not settings.get("no_done"):
        await send("[DONE]")
    await response.write_eof()
    return response


async def _whole(api: str, body: dict[str, Any], *, tokens: int, delay_s: float) -> web.Response:
    """A non-streamed completion of `tokens` words, after `delay_s`."""
    await asyncio.sleep(delay_s)
    text = "".join(f"t{i} " for i in range(tokens))
    if api == "chat":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
        kind = "chat.completion"
    else:
        choice, kind = {"index": 0, "text": text}, "text_completion"
    choice["finish_reason"] = "length"
    usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": 1 + tokens}
    model = body.get("model", "")
    return web.json_response(
        {"id": "x", "object": kind, "created": 0, "model": model, "choices": [choice], "usage": usage}
    )


async def chat(request: web.Request) -> web.StreamResponse:
    return await stream(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await stream(request, "completions")


def make_app() -> web.Application:
    app = web.Application()
    app[TRUTH] = {}
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/fixture/truth", truth)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(make_app(), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
