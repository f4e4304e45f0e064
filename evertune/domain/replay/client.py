"""The open-loop replay client: sends a plan to any OpenAI-compatible URL and measures what a client sees.

Open loop: each request leaves at its due time (`at_s / (rate * time_scale)` after the start, see
`evertune.domain.replay.schedule`) whatever happened to the earlier ones; one aiohttp session with an
unlimited connector carries every stream. A preflight `GET /v1/models` runs before the clock
starts, so an unreachable target fails at once with one line. The client watches its own lateness
(send lag, event-loop stalls, in-flight cap) and says when it fell behind (`ReplayRun.lag`).

Several targets (the replicas of one engine config, say) share one replay: each conversation goes to
one of them, dealt round robin (`evertune.domain.replay.spread`), and each is preflighted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from evertune.domain.replay.lag import DEFAULT_LAG_THRESHOLD_MS, assess_lag
from evertune.domain.replay.priming import primers
from evertune.domain.replay.results import ErrorClass, ReplayRun, RequestResult
from evertune.domain.replay.schedule import due_offsets
from evertune.domain.replay.spread import spread
from evertune.domain.replay.sse import BadChunk, SseDecoder, read_chunk
from evertune.domain.replay.wire import API_PATHS, MODELS_PATH, base_url, encode_body
from evertune.domain.workloads.plan import PlannedRequest
from evertune.errors import FailedPrecondition, InvalidArgument, NotFound, Unauthenticated, Unavailable
from evertune.infra import engine_http

Clock = Callable[[], float]
PREFLIGHT_TIMEOUT_S = 10.0  #: the most the preflight `GET /v1/models` may take
LOOP_TICK_S = 0.01  #: period of the ticker that measures event-loop stalls
NAN = float("nan")


class TargetUnreachable(Unavailable):
    """The target URL cannot be connected to (refused, unknown host, timed out)."""


class TargetIncompatible(FailedPrecondition):
    """The target answered, but not like an OpenAI-compatible server (`/v1/models`)."""


class TargetUnauthorized(Unauthenticated):
    """The target wants credentials (pass `headers={"Authorization": "Bearer ..."}`)."""


class ModelNotServed(NotFound):
    """The model asked for is not among the target's served models."""


def _connect_reason(err: aiohttp.ClientConnectorError) -> str:
    os_error = err.os_error
    if isinstance(os_error, socket.gaierror) and os_error.strerror:
        return os_error.strerror
    if os_error.errno and os_error.errno > 0:
        return os.strerror(os_error.errno)
    return " ".join(str(os_error).split()) or type(os_error).__name__


def _new_session(headers: Mapping[str, str] | None) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30)
    # No aiohttp deadline: each request runs under its own `asyncio.timeout`, so timeouts classify.
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None),
        headers=dict(headers or {}),
    )


async def served_models(session: aiohttp.ClientSession, target: str, *, timeout_s: float) -> list[str]:
    """`GET /v1/models` on the target: the ids of its served models, in its order.

    Raises `TargetUnreachable`, `TargetUnauthorized` or `TargetIncompatible`, each one line.
    """
    url = base_url(target)
    try:
        async with asyncio.timeout(timeout_s), session.get(url + MODELS_PATH) as response:
            if response.status in (401, 403):
                raise TargetUnauthorized(f"{url} refused {MODELS_PATH} with HTTP {response.status}")
            if response.status != 200:
                raise TargetIncompatible(
                    f"{url} answered HTTP {response.status} on {MODELS_PATH}: not an OpenAI-compatible server"
                )
            body = await response.json(content_type=None)
    except aiohttp.ClientConnectorError as err:
        raise TargetUnreachable(f"cannot reach {url}: {_connect_reason(err)}") from None
    except TimeoutError:
        raise TargetUnreachable(
            f"cannot reach {url}: no answer on {MODELS_PATH} within {timeout_s:g} s"
        ) from None
    except aiohttp.ClientError as err:
        raise TargetUnreachable(f"cannot reach {url}: {type(err).__name__}: {err}") from None
    except ValueError:
        raise TargetIncompatible(f"{url}{MODELS_PATH} did not answer JSON") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise TargetIncompatible(f"{url}{MODELS_PATH} has no model list (`data`)")
    return [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]


async def list_models(
    target: str, *, headers: Mapping[str, str] | None = None, timeout_s: float = PREFLIGHT_TIMEOUT_S
) -> list[str]:
    """The target's served model ids, on a session of its own."""
    async with _new_session(headers) as session:
        return await served_models(session, target, timeout_s=timeout_s)


def _pick_model(served: Sequence[str], model: str | None, url: str) -> str:
    if model is None:
        if not served:
            raise TargetIncompatible(f"{url} serves no model")
        return served[0]
    if model not in served:
        listed = ", ".join(served[:10]) or "nothing"
        raise ModelNotServed(f"model {model!r} is not served by {url} (it serves: {listed})")
    return model


def _http_error_class(status: int) -> ErrorClass:
    if 400 <= status < 500:
        return "http_4xx"
    if status >= 500:
        return "http_5xx"
    return "http_other"


def _error_message(body: bytes) -> str:
    """The `error.message` (or `message`/`detail`) of an OpenAI-style error body, else ""."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(parsed, dict):
        return ""
    error = parsed.get("error", parsed)
    message = error.get("message") or error.get("detail") if isinstance(error, dict) else error
    return " ".join(str(message or "").split())[:200]


@dataclass
class _Stream:
    """What one response stream has shown so far (mutable while reading)."""

    ttft_ms: float | None = None  #: send -> first text chunk
    gaps_ms: list[float] = field(default_factory=list)  #: gaps between text chunks
    last_s: float = 0.0  #: clock reading of the last text chunk
    chunks: int = 0  #: text chunks seen
    prompt_tokens: int | None = None  #: from the usage chunk
    completion_tokens: int | None = None  #: from the usage chunk
    done_s: float | None = None  #: clock reading of `[DONE]`
    status: int = 0  #: HTTP status, once headers arrived
    error_class: ErrorClass = ""  #: set when something went wrong
    error: str = ""  #: one line of detail

    def fail(self, error_class: ErrorClass, error: str) -> None:
        if not self.error_class:
            self.error_class, self.error = error_class, " ".join(error.split())[:200]

    def take(self, payloads: list[str], *, now: float, sent: float) -> None:
        """Account for the payloads that arrived together at `now`. Raises `BadChunk`."""
        for payload in payloads:
            if self.done_s is not None:
                return
            chunk = read_chunk(payload)
            if chunk.error:
                raise BadChunk(f"error in stream: {chunk.error}")
            if chunk.done:
                self.done_s = now
                return
            if chunk.content:
                if self.ttft_ms is None:
                    self.ttft_ms = (now - sent) * 1000.0
                else:
                    self.gaps_ms.append((now - self.last_s) * 1000.0)
                self.last_s = now
                self.chunks += 1
            if chunk.prompt_tokens is not None:
                self.prompt_tokens = chunk.prompt_tokens
            if chunk.completion_tokens is not None:
                self.completion_tokens = chunk.completion_tokens


class _Replay:
    """State of one replay: the session, the clock, the slots, the results as they come."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        fresh: aiohttp.ClientSession,
        urls: Sequence[str],
        assigned: Sequence[int],
        model: str,
        timeout_s: float,
        max_in_flight: int,
        ignore_eos: bool,
        clock: Clock,
        on_result: Callable[[RequestResult], None] | None,
        on_sent: Callable[[str], None] | None,
        size: int,
    ) -> None:
        self.session = session
        #: for a request whose pooled connection the engine had closed (`engine_http`)
        self.fresh = fresh
        self.urls = urls  #: base URLs of the targets
        self.assigned = assigned  #: per request (plan order), the index of its target in `urls`
        self.model = model
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self.ignore_eos = ignore_eos
        self.clock = clock
        self.on_result = on_result
        self.on_sent = on_sent
        self.slots = asyncio.Semaphore(max_in_flight)
        self.results: list[RequestResult | None] = [None] * size
        self.start = 0.0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.cap_hits = 0
        self.last_end = 0.0
        self.stalls_ms: list[float] = []

    async def tick(self, stop: asyncio.Event) -> None:
        """Measure how late the loop wakes a sleeper: stalls that also delay reading chunks."""
        while not stop.is_set():
            before = self.clock()
            await asyncio.sleep(LOOP_TICK_S)
            self.stalls_ms.append(max(0.0, (self.clock() - before - LOOP_TICK_S) * 1000.0))

    async def schedule(self, plan: Sequence[PlannedRequest], offsets: Sequence[float]) -> None:
        """Start each request at its due time, in due order, never waiting on earlier ones."""
        order = sorted(range(len(plan)), key=lambda i: offsets[i])
        async with asyncio.TaskGroup() as group:
            for index in order:
                delay = self.start + offsets[index] - self.clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                group.create_task(self.one(index, request=plan[index], due=offsets[index]))

    async def one(self, index: int, *, request: PlannedRequest, due: float) -> None:
        if self.slots.locked():
            self.cap_hits += 1
            try:
                async with asyncio.timeout(max(0.0, self.start + due + self.timeout_s - self.clock())):
                    await self.slots.acquire()
            except TimeoutError:
                self.record(index, self.never_sent(request, due))
                return
        else:
            await self.slots.acquire()
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            result = await self.send(request, due, url=self.urls[self.assigned[index]])
        finally:
            self.in_flight -= 1
            self.slots.release()
        self.record(index, result)

    def record(self, index: int, result: RequestResult) -> None:
        self.results[index] = result
        if result.e2e_ms is not None:
            self.last_end = max(self.last_end, result.sent_s + result.e2e_ms / 1000.0)
        if self.on_result is not None:
            self.on_result(result)

    def never_sent(self, request: PlannedRequest, due: float) -> RequestResult:
        return RequestResult(
            request_id=request.request_id,
            conversation_id=request.conversation_id,
            scheduled_s=due,
            sent_s=NAN,
            lag_ms=NAN,
            ttft_ms=None,
            itl_ms=(),
            e2e_ms=None,
            prompt_tokens=None,
            completion_tokens=None,
            chunks=0,
            status=0,
            error_class="client_lag",
            error=f"not sent: in-flight cap {self.max_in_flight} full for {self.timeout_s:g} s",
        )

    async def prime(self, plan: Sequence[PlannedRequest]) -> tuple[int, int]:
        """Send the plan's primers (`evertune.domain.replay.priming`) at once, within the in-flight cap,
        each to its conversation's target, and wait for all; (sent, failed). Not measured."""
        pairs = primers(plan)

        async def one(index: int, primer: PlannedRequest) -> bool:
            async with self.slots:
                _, stream = await self.read(primer, url=self.urls[self.assigned[index]], announce=False)
            return not stream.error_class

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(index, primer)) for index, primer in pairs]
        return len(tasks), sum(1 for t in tasks if not t.result())

    async def read(self, request: PlannedRequest, *, url: str, announce: bool) -> tuple[float, _Stream]:
        """Send `request` to `url` and read its answer within `timeout_s`: the clock reading when it
        left and what its stream showed, any failure classified there. `announce`: call `on_sent`."""
        body = encode_body(request, model=self.model, ignore_eos=self.ignore_eos)
        headers = {"Content-Type": "application/json", "X-Request-Id": request.request_id}
        stream = _Stream()
        sent = self.clock()
        if announce and self.on_sent is not None:
            self.on_sent(request.request_id)
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.exchange(request, url=url, body=body, headers=headers, stream=stream, sent=sent)
        except TimeoutError:
            if stream.done_s is None:  # a stall after `[DONE]` (draining the body) is no timeout
                stream.fail("timeout", f"not finished within {self.timeout_s:g} s")
        except aiohttp.ClientConnectorError as err:
            stream.fail("connect", f"cannot connect: {_connect_reason(err)}")
        except aiohttp.ClientError as err:
            if stream.done_s is None:
                kind: ErrorClass = "connect" if stream.status == 0 else "stream_broken"
                stream.fail(kind, f"{type(err).__name__}: {err}")
        except BadChunk as err:
            stream.fail("stream_broken", str(err))
        return sent, stream

    async def send(self, request: PlannedRequest, due: float, *, url: str) -> RequestResult:
        sent, stream = await self.read(request, url=url, announce=True)
        end = stream.done_s if stream.done_s is not None and not stream.error_class else self.clock()
        return RequestResult(
            request_id=request.request_id,
            conversation_id=request.conversation_id,
            scheduled_s=due,
            sent_s=sent - self.start,
            lag_ms=(sent - self.start - due) * 1000.0,
            ttft_ms=stream.ttft_ms,
            itl_ms=tuple(stream.gaps_ms),
            e2e_ms=(end - sent) * 1000.0,
            prompt_tokens=stream.prompt_tokens,
            completion_tokens=stream.completion_tokens,
            chunks=stream.chunks,
            status=stream.status,
            error_class=stream.error_class,
            error=stream.error,
            target=url if len(self.urls) > 1 else "",
        )

    async def exchange(
        self,
        request: PlannedRequest,
        *,
        url: str,
        body: bytes,
        headers: dict[str, str],
        stream: _Stream,
        sent: float,
    ) -> None:
        async with engine_http.post(
            self.session, url + API_PATHS[request.api], data=body, headers=headers, fresh=self.fresh
        ) as response:
            stream.status = response.status
            if response.status != 200:
                detail = _error_message(await response.read())  # the body itself is not kept
                stream.fail(_http_error_class(response.status), f"HTTP {response.status} {detail}")
                return
            decoder = SseDecoder()
            async for data in response.content.iter_any():
                stream.take(decoder.feed(data), now=self.clock(), sent=sent)
                if stream.done_s is not None:
                    break
            else:
                stream.take(decoder.close(), now=self.clock(), sent=sent)
            if stream.done_s is None:
                stream.fail("stream_broken", "stream ended without [DONE]")
                return
            # Read the rest (the chunked terminator) so the connection goes back to the pool.
            with contextlib.suppress(aiohttp.ClientError):
                async for _ in response.content.iter_any():
                    pass


async def replay(
    plan: Sequence[PlannedRequest],
    *,
    target: str | Sequence[str],
    model: str | None = None,
    rate: float = 1.0,
    time_scale: float = 1.0,
    timeout_s: float = 60.0,
    max_in_flight: int = 2000,
    on_result: Callable[[RequestResult], None] | None = None,
    on_sent: Callable[[str], None] | None = None,
    headers: Mapping[str, str] | None = None,
    ignore_eos: bool = False,
    lag_threshold_ms: float = DEFAULT_LAG_THRESHOLD_MS,
    clock: Clock = time.perf_counter,
    prime: bool = False,
) -> ReplayRun:
    """Replay `plan` open-loop against `target` (an OpenAI-compatible base URL) and measure each request.

    `target` may also be several base URLs serving the same model (an engine's replicas): each
    conversation then goes to one of them, round robin in the order conversations start (see
    `evertune.domain.replay.spread`), and each result names its `target`. Every target is preflighted.

    A request planned at `at_s` leaves `at_s / (rate * time_scale)` s after the start. `model=None`
    takes the target's first served model. `timeout_s` bounds each request from send to `[DONE]`;
    at most `max_in_flight` requests are in flight (a request that finds the cap full waits for a
    slot, which marks the run `fell_behind`; one that waits `timeout_s` is `client_lag`, not sent).
    `headers` go with every request (e.g. `Authorization`). `on_sent(request_id)` and
    `on_result(result)` are called as requests leave and finish (keep them quick: they run on the
    loop that measures). Raises `TargetUnreachable` (one line) before the clock starts when the
    target cannot be reached, `ModelNotServed` when `model` is not served. With `prime`, each
    conversation already under way at the plan's start first gets its history sent, unmeasured,
    before the clock starts (`evertune.domain.replay.priming`: the prefix cache a live engine would hold).
    """
    offsets = due_offsets(plan, rate=rate, time_scale=time_scale)
    if max_in_flight < 1:
        raise InvalidArgument(f"max_in_flight must be at least 1, got {max_in_flight}")
    urls = [base_url(target)] if isinstance(target, str) else [base_url(t) for t in target]
    if not urls:
        raise InvalidArgument("replay needs at least one target URL")
    url = urls[0]
    async with _new_session(headers) as session, engine_http.fresh_session(session) as fresh:
        preflight_s = min(timeout_s, PREFLIGHT_TIMEOUT_S)
        served = await served_models(session, url, timeout_s=preflight_s)
        chosen = _pick_model(served, model, url)
        for other in urls[1:]:
            _pick_model(await served_models(session, other, timeout_s=preflight_s), chosen, other)
        state = _Replay(
            session=session,
            fresh=fresh,
            urls=urls,
            assigned=spread(plan, offsets, targets=len(urls)),
            model=chosen,
            timeout_s=timeout_s,
            max_in_flight=max_in_flight,
            ignore_eos=ignore_eos,
            clock=clock,
            on_result=on_result,
            on_sent=on_sent,
            size=len(plan),
        )
        primed, prime_failed = await state.prime(plan) if prime else (0, 0)
        started_at = time.time()
        state.start = clock()
        stop = asyncio.Event()
        ticker = asyncio.create_task(state.tick(stop))
        try:
            await state.schedule(plan, offsets)
        finally:
            stop.set()
            ticker.cancel()
            await asyncio.wait([ticker])
    results = tuple(r for r in state.results if r is not None)
    lag = assess_lag(
        [r.lag_ms for r in results if r.error_class != "client_lag"],
        loop_stalls_ms=state.stalls_ms,
        cap_hits=state.cap_hits,
        max_in_flight=max_in_flight,
        threshold_ms=lag_threshold_ms,
    )
    return ReplayRun(
        target=url,
        model=chosen,
        rate=rate,
        time_scale=time_scale,
        started_at=started_at,
        duration_s=state.last_end,
        results=results,
        lag=lag,
        peak_in_flight=state.peak_in_flight,
        targets=tuple(urls),
        primed=primed,
        prime_failed=prime_failed,
    )
