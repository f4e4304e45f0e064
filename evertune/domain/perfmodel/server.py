"""The `sim` engine: an OpenAI-compatible server whose tokens come on the performance model's schedule.

    python -m evertune.domain.perfmodel.server --model DIR --port P [--hardware h200] [--spec-json JSON]
        [--calibration FILE] [--served-model-name NAME]

The same `Scheduler` and `StepCost` as the offline simulation, driven by the wall clock: a loop
plans a step, sleeps for the step's modelled duration (to an absolute deadline, so steps do not
drift), then hands each sampled token to its request's stream. Prompts are sized and hashed with
the model folder's tokenizer (only `config.json` and `tokenizer.json` are read, never weights), so
prefix caching behaves as it would for these prompts. Generated text is words of evertune's corpus,
one word per token; every request generates exactly its `max_tokens` (as with `ignore_eos`).

Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions`
(streamed or not; `stream_options.include_usage` adds vLLM's usage chunk), `GET /metrics` (vLLM's
series names, see `evertune.domain.engines.metrics`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import HardwareProfile, get_profile
from evertune.domain.model.corpus import sentences
from evertune.domain.perfmodel.arch import ModelArch, load_arch
from evertune.domain.perfmodel.calibration import efficiency_of, load_calibration
from evertune.domain.perfmodel.des import plan_time
from evertune.domain.perfmodel.scheduler import Scheduler, SimRequest
from evertune.domain.perfmodel.simulate import resolve
from evertune.domain.perfmodel.steptime import Efficiency, StepCost
from evertune.domain.perfmodel.workload import PromptTokens, block_hashes
from evertune.domain.workloads.plan import ChatMessage, PlannedRequest
from evertune.errors import EvertuneError, InvalidArgument

#: `max_tokens` when a request sets none (OpenAI's completions default; chat gets the same here).
DEFAULT_MAX_TOKENS = 16
#: How far the step loop may fall behind the modelled schedule before it starts again from now.
MAX_LAG_S = 0.05
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)


@dataclass
class _Stream:
    """A request's tokens on their way to its HTTP response."""

    request: SimRequest  #: the scheduler's request
    queue: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)  #: words; None = finished


class _Metrics:
    """vLLM-named Prometheus series of the sim engine (children bound to this engine's labels)."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        names = ["model_name", "engine"]
        labels = {"model_name": model_name, "engine": "0"}
        registry = self.registry

        def hist(name: str, doc: str) -> Any:
            return Histogram(name, doc, names, registry=registry, buckets=_LATENCY_BUCKETS).labels(**labels)

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, names, registry=registry).labels(**labels)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, names, registry=registry).labels(**labels)

        self.ttft = hist("vllm:time_to_first_token_seconds", "time to first token")
        self.itl = hist("vllm:inter_token_latency_seconds", "time between tokens")
        self.queue = hist("vllm:request_queue_time_seconds", "arrival to first schedule")
        self.prefill = hist("vllm:request_prefill_time_seconds", "first schedule to first token")
        self.decode = hist("vllm:request_decode_time_seconds", "first token to last token")
        self.preemptions = counter("vllm:num_preemptions", "preemptions")
        self.hits = counter("vllm:prefix_cache_hits", "prefix cache hits, tokens")
        self.queries = counter("vllm:prefix_cache_queries", "prefix cache queries, tokens")
        self.prompt = counter("vllm:prompt_tokens", "prompt tokens")
        self.generation = counter("vllm:generation_tokens", "generated tokens")
        self.success = counter("vllm:request_success", "finished requests")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV cache usage, 0..1")
        self.running = gauge("vllm:num_requests_running", "running requests")
        self.waiting = gauge("vllm:num_requests_waiting", "waiting requests")


class LiveEngine:
    """The scheduler driven by the wall clock (see the module doc)."""

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        cost: StepCost,
        metrics: _Metrics,
        request_overhead_s: float = 0.0,
        request_overhead_per_token_s: float = 0.0,
    ) -> None:
        self.scheduler = scheduler
        self.cost = cost
        self.metrics = metrics
        self.request_overhead_s = request_overhead_s  #: delay before the scheduler sees a request
        self.request_overhead_per_token_s = request_overhead_per_token_s  #: and per prompt token
        self._streams: dict[int, _Stream] = {}
        self._wake = asyncio.Event()
        self._next_index = 0
        self._last = {"preemptions": 0, "hits": 0, "queries": 0, "prompt": 0, "generation": 0}
        self.steps = 0  #: steps run

    def submit(
        self, *, prompt_tokens: int, hashes: tuple[int, ...], max_tokens: int, received_s: float
    ) -> _Stream:
        """Queue a request received at `received_s` (monotonic); it reaches the scheduler
        `request_overhead_s` (+ `request_overhead_per_token_s` per prompt token) after that (the
        time this server spent parsing it counts as part of the overhead). Its words arrive on the
        returned stream's queue."""
        request = SimRequest(
            index=self._next_index,
            arrival_s=received_s,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            hashes=hashes,
        )
        self._next_index += 1
        stream = _Stream(request=request)
        self._streams[request.index] = stream
        overhead = self.request_overhead_s + self.request_overhead_per_token_s * prompt_tokens
        delay = received_s + overhead - time.monotonic()
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self._admit, stream)
        else:
            self._admit(stream)
        return stream

    def _admit(self, stream: _Stream) -> None:
        """The request reaches the scheduler (unless its client left meanwhile)."""
        if stream.request.index in self._streams:
            self.scheduler.add(stream.request)
            self._wake.set()

    def cancel(self, stream: _Stream) -> None:
        """The response is over (done, or the client went away): drop the request and its blocks."""
        self._streams.pop(stream.request.index, None)
        self.scheduler.abort(stream.request)

    async def run(self) -> None:
        """Plan and run steps while there is work; sleep until a request arrives otherwise.

        While the engine stays busy, each step starts at the previous step's modelled end, not at
        whenever this loop got round to it: the time spent handing out tokens is absorbed in the
        next step's sleep, so the schedule does not drift (unless the loop falls more than
        `MAX_LAG_S` behind, when it starts again from now).
        """
        words = _words()
        w = 0
        m = self.metrics
        while True:
            await self._wake.wait()
            self._wake.clear()
            start = time.monotonic()
            while self.scheduler.has_work:
                plan = self.scheduler.schedule(start)
                if not plan.requests:
                    break
                before = [r.output_tokens for r in plan.requests]
                end = start + plan_time(self.cost, plan)
                delay = end - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                finished = self.scheduler.complete(plan, end)
                self.steps += 1
                for request, had in zip(plan.requests, before, strict=True):
                    if request.output_tokens == had:
                        continue
                    if request.output_tokens == 1:
                        m.ttft.observe(end - request.arrival_s)
                        m.queue.observe(request.scheduled_s - request.arrival_s)
                        m.prefill.observe(end - request.scheduled_s)
                    elif request.gaps:
                        m.itl.observe(request.gaps[-1])
                    stream = self._streams.get(request.index)
                    if stream is not None:
                        stream.queue.put_nowait(words[w % len(words)])
                        w += 1
                for request in finished:
                    m.decode.observe(end - request.first_token_s)
                    m.success.inc()
                    stream = self._streams.pop(request.index, None)
                    if stream is not None:
                        stream.queue.put_nowait(None)
                self._update_gauges()
                now = time.monotonic()
                start = end if now - end < MAX_LAG_S else now

    def _update_gauges(self) -> None:
        s, m = self.scheduler, self.metrics
        now = {
            "preemptions": s.preemptions,
            "hits": s.prefix_hits,
            "queries": s.prefix_queries,
            "prompt": s.prompt_tokens,
            "generation": s.generation_tokens,
        }
        counters = {
            "preemptions": m.preemptions,
            "hits": m.hits,
            "queries": m.queries,
            "prompt": m.prompt,
            "generation": m.generation,
        }
        for key, counter in counters.items():
            if now[key] > self._last[key]:
                counter.inc(now[key] - self._last[key])
        self._last = now
        m.kv_usage.set(s.pool.used / s.pool.num_blocks)
        m.running.set(len(s.running))
        m.waiting.set(len(s.waiting))


def _words() -> list[str]:
    """Words of evertune's corpus, each with a leading space, in a fixed order."""
    text = " ".join(sentences(random.Random(0), 400))
    return [" " + word for word in text.split()]


@dataclass
class SimServer:
    """The HTTP side of the sim engine."""

    engine: LiveEngine  #: the live scheduler
    tokens: PromptTokens  #: prompt tokenization
    block_size: int  #: KV block size, for hashing prompts
    model_name: str  #: the served model name
    max_model_len: int  #: longest context accepted

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "evertune-sim",
                        "max_model_len": self.max_model_len,
                    }
                ],
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.engine.metrics.registry)
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        received = time.monotonic()
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise InvalidArgument("the request body must be a JSON object")
            ids, max_tokens = self._parse(body, chat=chat)
        except (ValueError, InvalidArgument) as err:
            return _error(400, str(err).splitlines()[0] if str(err) else "bad request")
        model = body.get("model", self.model_name)
        if model != self.model_name:
            return _error(404, f"The model `{model}` does not exist.")
        if len(ids) + max_tokens > self.max_model_len:
            return _error(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens; the request asks "
                f"for {len(ids)} prompt tokens and {max_tokens} completion tokens.",
            )
        stream = self.engine.submit(
            prompt_tokens=len(ids),
            hashes=block_hashes(ids, self.block_size),
            max_tokens=max_tokens,
            received_s=received,
        )
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        usage = {
            "prompt_tokens": len(ids),
            "completion_tokens": max_tokens,
            "total_tokens": len(ids) + max_tokens,
        }
        try:
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return await self._stream(
                    request, stream, rid=rid, chat=chat, usage=usage if include_usage else None
                )
            words = [word async for word in _drain(stream)]
        finally:
            self.engine.cancel(stream)
        text = "".join(words)
        created = int(time.time())
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            kind = "text_completion"
        return web.json_response(
            {
                "id": rid,
                "object": kind,
                "created": created,
                "model": self.model_name,
                "choices": [choice],
                "usage": usage,
            }
        )

    def _parse(self, body: dict[str, Any], *, chat: bool) -> tuple[list[int], int]:
        """Prompt token ids and `max_tokens` of a request body."""
        raw_max = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = DEFAULT_MAX_TOKENS if raw_max is None else raw_max
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise InvalidArgument(f"max_tokens must be a positive integer, got {raw_max!r}")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise InvalidArgument("messages must be a non-empty list")
            parsed: list[ChatMessage] = []
            for message in messages:
                if not isinstance(message, dict) or message.get("role") not in (
                    "system",
                    "user",
                    "assistant",
                ):
                    raise InvalidArgument("each message needs a role of system, user or assistant")
                content = message.get("content", "")
                if not isinstance(content, str):
                    raise InvalidArgument("message content must be a string")
                parsed.append(ChatMessage(role=message["role"], content=content))
            planned = PlannedRequest(
                at_s=0.0, request_id="", api="chat", max_tokens=max_tokens, messages=tuple(parsed)
            )
            return self.tokens.prompt(planned), max_tokens
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return list(prompt), max_tokens
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise InvalidArgument("prompt must be a non-empty string or a list of token ids")
        return list(self.tokens.text(prompt)), max_tokens

    async def _stream(
        self, request: web.Request, stream: _Stream, *, rid: str, chat: bool, usage: dict[str, int] | None
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        created = int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            payload = {
                "id": rid,
                "object": kind,
                "created": created,
                "model": self.model_name,
                "choices": choices,
            }
            payload.update(extra)
            return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

        if chat:
            await response.write(
                chunk(
                    [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            )
        produced = 0
        async for word in _drain(stream):
            produced += 1
            last = produced == stream.request.max_tokens
            finish = "length" if last else None
            if chat:
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": {"content": word},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            else:
                choice = {"index": 0, "text": word, "logprobs": None, "finish_reason": finish}
            await response.write(chunk([choice]))
        if usage is not None:
            await response.write(chunk([], usage=usage))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def _drain(stream: _Stream) -> AsyncIterator[str]:
    """The stream's words until it finishes."""
    while (word := await stream.queue.get()) is not None:
        yield word


def _error(status: int, message: str) -> web.Response:
    kind = "NotFoundError" if status == 404 else "BadRequestError"
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def build(
    *,
    model_dir: Path,
    spec: EngineSpec,
    hardware: HardwareProfile,
    efficiency: Efficiency,
    served_model_name: str | None = None,
) -> tuple[SimServer, LiveEngine]:
    """The server and live engine for a model folder, config, hardware and factors."""
    arch: ModelArch = load_arch(model_dir)
    config = resolve(spec, hardware, arch)
    cost = StepCost.of(arch, hardware, efficiency, tp=spec.tensor_parallel_size or 1)
    name = served_model_name or spec.model
    engine = LiveEngine(
        scheduler=Scheduler(config),
        cost=cost,
        metrics=_Metrics(name),
        request_overhead_s=efficiency.request_overhead_s,
        request_overhead_per_token_s=efficiency.request_overhead_per_token_s,
    )
    raw = json.loads((model_dir / "config.json").read_text())
    max_len = int(spec.max_model_len or raw.get("max_position_embeddings") or 8192)
    server = SimServer(
        engine=engine,
        tokens=PromptTokens.of_folder(model_dir),
        block_size=config.block_size,
        model_name=name,
        max_model_len=max_len,
    )
    return server, engine


async def serve(server: SimServer, engine: LiveEngine, *, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT."""
    # Streams still open at SIGTERM get 2 s to finish (aiohttp's default waits 60 s, longer than
    # an engine shell waits before SIGKILL).
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stepping = asyncio.create_task(engine.run())

    def stepping_ended(task: asyncio.Task[None]) -> None:
        # The step loop never returns; if it fails, the engine is broken: say why and exit.
        if not task.cancelled() and task.exception() is not None:
            print(f"sim engine step loop failed: {task.exception()!r}", flush=True)
            stop.set()

    stepping.add_done_callback(stepping_ended)
    print(f"sim engine serving {server.model_name} on http://{host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        stepping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stepping
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evertune.domain.perfmodel.server", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--model", type=Path, required=True, help="model folder (config.json, tokenizer.json)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--hardware", default="cpu", help="hardware profile simulated (default cpu)")
    parser.add_argument("--spec-json", default=None, help="the EngineSpec as JSON (knobs)")
    parser.add_argument(
        "--calibration", type=Path, default=None, help="calibration JSON with efficiency factors"
    )
    args = parser.parse_args(argv)
    try:
        fields: dict[str, object] = json.loads(args.spec_json) if args.spec_json else {}
        fields.setdefault("model", str(args.model))
        fields["kind"] = "sim"
        spec = EngineSpec.parse(fields)
        hardware = get_profile(args.hardware)
        efficiency = efficiency_of(load_calibration(args.calibration)) if args.calibration else Efficiency()
        server, engine = build(
            model_dir=args.model,
            spec=spec,
            hardware=hardware,
            efficiency=efficiency,
            served_model_name=args.served_model_name,
        )
    except EvertuneError as err:
        print(f"evertune: {err}", flush=True)
        return err.exit_code
    asyncio.run(serve(server, engine, host=args.host, port=args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
