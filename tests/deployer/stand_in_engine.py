"""A tiny OpenAI-compatible server standing in for an engine in the deployer tests.

Run as a script: `python stand_in_engine.py --port N --model NAME --tag TAG [--ready-after S]
[--exit-at-start CODE]`. It answers:

    GET  /health                 200 once `--ready-after` seconds passed (503 before)
    GET  /metrics                vLLM's gauges: vllm:num_requests_running / _waiting
    GET  /v1/models              the served model
    POST /v1/chat/completions    a stream of `--tokens` chunks "<tag> " every `--gap-ms` ms
                                 (non-streaming: one message); X-Hold-Ms delays the first chunk
    POST /fixture/exit           answers, then exits the process with code 3 (a crash)

`--exit-at-start CODE` exits at once with CODE (an engine that fails to start).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from aiohttp import web

RUNNING = web.AppKey("running", list)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--tag", default="engine")
    parser.add_argument("--ready-after", type=float, default=0.0)
    parser.add_argument("--exit-at-start", type=int, default=None)
    parser.add_argument("--tokens", type=int, default=5)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    args = parser.parse_args()
    if args.exit_at_start is not None:
        print("stand-in engine: refusing to start", flush=True)
        sys.exit(args.exit_at_start)
    started = time.monotonic()
    app = web.Application()
    app[RUNNING] = [0]

    async def health(request: web.Request) -> web.Response:
        ready = time.monotonic() - started >= args.ready_after
        return web.Response(status=200 if ready else 503)

    async def metrics(request: web.Request) -> web.Response:
        label = f'{{model_name="{args.model}",engine="0"}}'
        text = (
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{label} {request.app[RUNNING][0]}\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{label} 0\n"
        )
        return web.Response(text=text, content_type="text/plain")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": args.model, "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("model") != args.model:
            return web.json_response({"error": {"message": f"unknown model {body.get('model')}"}}, status=404)
        request.app[RUNNING][0] += 1
        try:
            await asyncio.sleep(float(request.headers.get("X-Hold-Ms", "0")) / 1000)
            if not body.get("stream"):
                message = {"role": "assistant", "content": f"{args.tag} " * args.tokens}
                return web.json_response(
                    {"id": "x", "object": "chat.completion", "choices": [{"message": message}]}
                )
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for i in range(args.tokens):
                if i:
                    await asyncio.sleep(args.gap_ms / 1000)
                chunk = {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": f"{args.tag} "}}],
                }
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        finally:
            request.app[RUNNING][0] -= 1

    async def crash(request: web.Request) -> web.Response:
        asyncio.get_running_loop().call_later(0.05, os._exit, 3)
        return web.Response(text="exiting")

    app.add_routes(
        [
            web.get("/health", health),
            web.get("/metrics", metrics),
            web.get("/v1/models", models),
            web.post("/v1/chat/completions", chat),
            web.post("/fixture/exit", crash),
        ]
    )
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
