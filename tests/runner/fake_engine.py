"""A small OpenAI-compatible engine with known behaviour, standing in for vLLM in the runner tests.

Run as a script in its own process (the runner starts it through `FakeEngine`, a `VllmEngine`
whose command is this script). Options:

    --port N            where to listen (required)
    --ttft-ms X         delay before the first streamed token [10]
    --itl-ms X          delay between streamed tokens [2]
    --diverge-at K      greedy answers differ from the normal ones from token K on [never]
    --exit-at-start     print an error line and exit 3 before listening (an engine that never starts)
    --crash-after N     exit (code 9) when the N-th streamed request arrives (an engine that crashes)

Greedy answers (`return_token_ids`) are a fixed function of the messages: token i of an answer is
taken from SHA-256(messages, i), so the same prompt always gets the same answer, and
`--diverge-at K` plants an engine whose answers are wrong from token K on. Each streamed request
is logged as a line `streamed <X-Request-Id>` (which replica served what).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from typing import Any

from aiohttp import web

ARGS = web.AppKey("args", argparse.Namespace)
COUNT = web.AppKey("count", list)


def token_ids(messages: Any, n: int, diverge_at: int) -> list[int]:
    seed = json.dumps(messages, sort_keys=True).encode()
    out = []
    for i in range(n):
        salt = b"planted" if 0 <= diverge_at <= i else b""
        out.append(
            int.from_bytes(hashlib.sha256(seed + salt + i.to_bytes(4, "little")).digest()[:2], "little")
        )
    return out


async def health(request: web.Request) -> web.Response:
    return web.Response(text="")


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "fake-engine", "object": "model"}]})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text="# no metrics\n", content_type="text/plain")


async def chat(request: web.Request) -> web.StreamResponse:
    args = request.app[ARGS]
    body = await request.json()
    max_tokens = int(body.get("max_tokens", 16))
    if not body.get("stream"):
        ids = token_ids(body.get("messages"), max_tokens, args.diverge_at)
        choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "token_ids": ids}
        return web.json_response({"id": "x", "object": "chat.completion", "choices": [choice]})
    count = request.app[COUNT]
    count[0] += 1
    if 0 < args.crash_after <= count[0]:
        print("fatal: planted crash", file=sys.stderr, flush=True)
        os._exit(9)
    print(f"streamed {request.headers.get('X-Request-Id', '')}", flush=True)  # who was served where
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await asyncio.sleep(args.ttft_ms / 1000)
    for i in range(max_tokens):
        if i:
            await asyncio.sleep(args.itl_ms / 1000)
        chunk = {
            "id": "x",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": f"t{i} "}}],
        }
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    usage = {"prompt_tokens": 10, "completion_tokens": max_tokens}
    await response.write(f"data: {json.dumps({'id': 'x', 'choices': [], 'usage': usage})}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft-ms", type=float, default=10.0)
    parser.add_argument("--itl-ms", type=float, default=2.0)
    parser.add_argument("--diverge-at", type=int, default=-1)
    parser.add_argument("--exit-at-start", action="store_true")
    parser.add_argument("--crash-after", type=int, default=0)
    args, _ = parser.parse_known_args()
    if args.exit_at_start:
        print("RuntimeError: planted start failure", flush=True)
        sys.exit(3)
    app = web.Application()
    app[ARGS] = args
    app[COUNT] = [0]
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
