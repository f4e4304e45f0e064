"""An OpenAI-compatible engine with known behaviour, standing in for vLLM where vLLM itself is not
what a test checks (the replay client's timing, a trial's plumbing, rollouts, the gateway).

Run as a script in its own process, so its timing does not share the test's event loop:
`python tests/fake_engine.py --port N [options]`. Options (defaults in brackets):

    --model NAME         a model it serves; repeat for several [fake]; another one gets a 404
    --any-model          answer requests for any model too (an upstream that a gateway sends
                         its endpoints' names to)
    --ttft-ms X          delay from a request's arrival to its first token [20]
    --itl-ms X           delay between tokens [5]
    --tokens N           tokens per answer [the request's max_tokens, else 16]
    --tag TEXT           every token's text is "TEXT " [token i is "t<i> "]
    --ready-after S      `/health` answers 503 until S seconds after the start [0]
    --exit-at-start [CODE]  print an error line and exit with CODE [3] before listening
    --crash-after N      exit with code 9 when the N-th streamed request arrives
    --diverge-at K       greedy token ids differ from the normal ones from token K on [never]

Per request, the `X-Fake` header (comma-separated `key=value`s) overrides `ttft_ms`, `itl_ms` and
`tokens`, and plants a fault:

    status       answer this HTTP status with a JSON error instead of a stream
    drop_after   cut the connection after this many tokens
    no_done      1: end the stream cleanly but without `data: [DONE]`
    error_after  send an in-stream `{"error": ...}` payload after this many tokens
    crlf         1: end SSE lines with CRLF, and split each event across two writes
    whole        1: answer one JSON body (a non-streamed completion) after ttft_ms

Routes: `GET /health`, `GET /metrics` (vLLM's gauges `vllm:num_requests_running` and `_waiting`),
`GET /v1/models`, `POST /v1/chat/completions` and `/v1/completions` (streamed, or one body; a
non-streamed answer carries greedy `token_ids`, and a completion asked for `logprobs` with
`return_tokens_as_token_ids` carries them in vLLM's legacy form), `GET /fixture/truth`,
`POST /fixture/exit` (answers, then exits with code 3: a crash).

Greedy token ids are a fixed function of the prompt: token i is taken from SHA-256(prompt, i), so the
same prompt always gets the same answer, and `--diverge-at K` plants an engine whose answers are
wrong from token K on. Each streamed request is logged as a line `streamed <X-Request-Id>`.

Tokens are due on an absolute schedule (arrival + ttft + i * itl): asyncio.sleep overshoots, so the
server records what it actually did, per `X-Request-Id`: the time from the handler's start to the
write of each token. `GET /fixture/truth` returns them, with the request's wall-clock arrival,
`max_tokens` and count of chat messages: `{id: {"ttft_ms": x, "gaps_ms": [...], "arrived_at": t,
"max_tokens": n, "messages": m}}`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

#: Most tokens one answer has, whatever the request asks (a fixture, not a model).
MAX_TOKENS = 10_000
#: This script: tests run it as `python SCRIPT --port N [options]`.
SCRIPT = Path(__file__).resolve()

ARGS = web.AppKey("args", argparse.Namespace)
STATE = web.AppKey("state", dict)


def token_ids(prompt: Any, n: int, diverge_at: int) -> list[int]:
    """The greedy answer to `prompt`: n ids, planted wrong from `diverge_at` on (-1: never)."""
    seed = json.dumps(prompt, sort_keys=True).encode()
    out = []
    for i in range(n):
        salt = b"planted" if 0 <= diverge_at <= i else b""
        digest = hashlib.sha256(seed + salt + i.to_bytes(4, "little")).digest()
        out.append(int.from_bytes(digest[:2], "little"))
    return out


def _token_count(asked: Any) -> int:
    """Tokens to answer: what was asked, within 0..MAX_TOKENS; 16 for anything not a finite number
    (a fuzzed max_tokens of 10**18, "x" or inf must not make the fixture build a list that size)."""
    if isinstance(asked, bool) or not isinstance(asked, int | float):
        return 16
    if isinstance(asked, float) and not math.isfinite(asked):
        return 16
    return max(0, min(int(asked), MAX_TOKENS))


def _overrides(request: web.Request) -> dict[str, float]:
    settings: dict[str, float] = {}
    for item in request.headers.get("X-Fake", "").split(","):
        key, _, value = item.strip().partition("=")
        if key:
            settings[key] = float(value)
    return settings


def _text(args: argparse.Namespace, i: int) -> str:
    return f"{args.tag} " if args.tag else f"t{i} "


def _chunk(api: str, text: str | None, *, role: bool = False) -> dict[str, Any]:
    if api == "chat":
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
        return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    return {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": text}]}


def _error(message: str, status: int) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "fake", "code": status}}, status=status)


async def health(request: web.Request) -> web.Response:
    args, state = request.app[ARGS], request.app[STATE]
    return web.Response(status=200 if time.monotonic() - state["started"] >= args.ready_after else 503)


async def metrics(request: web.Request) -> web.Response:
    args, state = request.app[ARGS], request.app[STATE]
    label = f'{{model_name="{args.model[0]}",engine="0"}}'
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{label} {state['running']}\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{label} 0\n"
    )
    return web.Response(text=text, content_type="text/plain")


async def models(request: web.Request) -> web.Response:
    data = [{"id": name, "object": "model", "owned_by": "evertune-tests"} for name in request.app[ARGS].model]
    return web.json_response({"object": "list", "data": data})


async def truth(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE]["truth"])


async def crash(request: web.Request) -> web.Response:
    asyncio.get_running_loop().call_later(0.05, os._exit, 3)
    return web.Response(text="exiting")


async def answer(request: web.Request, api: str) -> web.StreamResponse:
    arrived = time.perf_counter()
    args, state = request.app[ARGS], request.app[STATE]
    overrides = _overrides(request)
    body = await request.json()
    if body.get("model") not in args.model and not args.any_model:
        return _error(f"The model `{body.get('model')}` does not exist.", 404)
    status = int(overrides.get("status", 200))
    if status != 200:
        return _error("fixture says so", status)
    tokens = _token_count(overrides.get("tokens", args.tokens or body.get("max_tokens", 16)))
    ttft_s = overrides.get("ttft_ms", args.ttft_ms) / 1000.0
    prompt = body.get("messages") if api == "chat" else body.get("prompt")
    state["running"] += 1
    try:
        if overrides.get("whole") or not body.get("stream"):
            await asyncio.sleep(ttft_s)
            return _whole(args, api, body, prompt=prompt, tokens=tokens)
        state["streamed"] += 1
        if 0 < args.crash_after <= state["streamed"]:
            print("fatal: planted crash", file=sys.stderr, flush=True)
            os._exit(9)
        print(f"streamed {request.headers.get('X-Request-Id', '')}", flush=True)  # who served what
        return await _stream(request, api, body, overrides, arrived=arrived, tokens=tokens, ttft_s=ttft_s)
    finally:
        state["running"] -= 1


def _whole(
    args: argparse.Namespace, api: str, body: dict[str, Any], *, prompt: Any, tokens: int
) -> web.Response:
    """A non-streamed completion of `tokens` tokens, with its greedy token ids."""
    text = "".join(_text(args, i) for i in range(tokens))
    ids = token_ids(prompt, tokens, args.diverge_at)
    if api == "chat":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
        kind = "chat.completion"
    else:
        choice, kind = {"index": 0, "text": text}, "text_completion"
    choice.update(finish_reason="length", token_ids=ids)
    top = body.get("logprobs")
    if api == "completions" and isinstance(top, int) and top > 0 and body.get("return_tokens_as_token_ids"):
        # vLLM's legacy completions form with ids as `token_id:<n>` texts; the greedy id first
        names = [f"token_id:{i}" for i in ids]
        choice["logprobs"] = {
            "tokens": names,
            "token_logprobs": [-0.1] * len(ids),
            "top_logprobs": [
                {name: -0.1, **{f"token_id:{i + k}": -1.0 - k for k in range(1, top)}}
                for name, i in zip(names, ids, strict=True)
            ],
        }
    usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": 1 + tokens}
    return web.json_response(
        {"id": "x", "object": kind, "created": 0, "model": body.get("model", ""), "choices": [choice],
         "usage": usage}
    )  # fmt: skip


async def _stream(
    request: web.Request,
    api: str,
    body: dict[str, Any],
    overrides: dict[str, float],
    *,
    arrived: float,
    tokens: int,
    ttft_s: float,
) -> web.StreamResponse:
    args = request.app[ARGS]
    itl_s = overrides.get("itl_ms", args.itl_ms) / 1000.0
    drop_after = int(overrides.get("drop_after", -1))
    error_after = int(overrides.get("error_after", -1))
    crlf = bool(overrides.get("crlf"))
    newline = "\r\n" if crlf else "\n"
    writes: list[float] = []
    gaps_ms: list[float] = []
    record: dict[str, Any] = {
        "ttft_ms": None,
        "gaps_ms": gaps_ms,
        "arrived_at": time.time(),
        "max_tokens": body.get("max_tokens"),
        "messages": len(messages) if isinstance(messages := body.get("messages"), list) else 0,
    }
    request.app[STATE]["truth"][request.headers.get("X-Request-Id", "")] = record
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(payload: str) -> None:
        event = f"data: {payload}{newline}{newline}".encode()
        if crlf:
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
        await send(json.dumps(_chunk(api, _text(args, i))))
        if i == 0:
            record["ttft_ms"] = (writes[0] - arrived) * 1000.0
        else:
            gaps_ms.append((writes[-1] - writes[-2]) * 1000.0)
    prompt = body.get("prompt") or body.get("messages") or ""
    usage = {"prompt_tokens": len(json.dumps(prompt)) // 4, "completion_tokens": len(writes)}
    await send(json.dumps({"id": "x", "object": "chunk", "choices": [], "usage": usage}))
    if not overrides.get("no_done"):
        await send("[DONE]")
    await response.write_eof()
    return response


async def chat(request: web.Request) -> web.StreamResponse:
    return await answer(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await answer(request, "completions")


def make_app(args: argparse.Namespace) -> web.Application:
    app = web.Application()
    app[ARGS] = args
    app[STATE] = {"started": time.monotonic(), "running": 0, "streamed": 0, "truth": {}}
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/fixture/truth", truth)
    app.router.add_post("/fixture/exit", crash)
    return app


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", action="append")
    parser.add_argument("--any-model", action="store_true")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=0)
    parser.add_argument("--tag", default="")
    parser.add_argument("--ready-after", type=float, default=0.0)
    parser.add_argument("--exit-at-start", type=int, nargs="?", const=3, default=None)
    parser.add_argument("--crash-after", type=int, default=0)
    parser.add_argument("--diverge-at", type=int, default=-1)
    args, _ = parser.parse_known_args(argv)  # vLLM's own options (the runner passes them) are ignored
    args.model = args.model or ["fake"]
    return args


def main() -> None:
    args = parse()
    if args.exit_at_start is not None:
        print("RuntimeError: planted start failure", flush=True)
        sys.exit(args.exit_at_start)
    web.run_app(make_app(args), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
