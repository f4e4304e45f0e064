"""Warming up a new deployment before it takes traffic: a few real streamed requests straight to
each replica (not through the gateway, so they are not in the endpoint's telemetry). They compile
and cache what the first callers would otherwise wait for; one that fails means the deployment
cannot serve, and its rollout fails before any caller sees it."""

from __future__ import annotations

import aiohttp

from evertune.domain.engines import EngineStartFailed

#: Seconds one warm-up request may take.
WARMUP_TIMEOUT_S = 120.0
#: Completion tokens asked of each warm-up request.
WARMUP_TOKENS = 4


async def warm_up(urls: list[str], *, model: str, requests: int, timeout_s: float = WARMUP_TIMEOUT_S) -> None:
    """`requests` streamed chat completions to each URL in turn; EngineStartFailed (one line) when
    one does not answer 200 with a complete stream."""
    if requests <= 0:
        return
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "warm-up"}],
        "max_tokens": WARMUP_TOKENS,
        "stream": True,
    }
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for url in urls:
            for i in range(requests):
                try:
                    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                        text = await response.text()
                        if response.status != 200:
                            raise EngineStartFailed(
                                f"warm-up request {i + 1} to {url} answered HTTP {response.status}"
                            )
                        if "[DONE]" not in text:
                            raise EngineStartFailed(
                                f"warm-up request {i + 1} to {url}: the stream did not finish"
                            )
                except (aiohttp.ClientError, TimeoutError) as err:
                    raise EngineStartFailed(
                        f"warm-up request {i + 1} to {url} failed: {type(err).__name__}"
                    ) from None
