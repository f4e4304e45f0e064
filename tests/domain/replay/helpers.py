"""Plans and server truth for the replay tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from evertune.domain.replay import ReplayRun
from evertune.domain.workloads.plan import ChatMessage, PlannedRequest

ATTEMPTS = 3  #: tries of a timing test before the machine is declared too busy to time anything


def chat_plan(
    n: int, *, every_s: float, prefix: str, max_tokens: int = 8, api: str = "chat", start_s: float = 0.0
) -> list[PlannedRequest]:
    """n requests, one every `every_s` seconds, ids `<prefix>-<i>`."""
    messages = (ChatMessage("system", "You are a voice agent."), ChatMessage("user", "Hello there."))
    return [
        PlannedRequest(
            at_s=start_s + i * every_s,
            request_id=f"{prefix}-{i}",
            api="chat" if api == "chat" else "completions",
            max_tokens=max_tokens,
            messages=messages if api == "chat" else (),
            prompt="Hello there." if api != "chat" else "",
            conversation_id=f"{prefix}-call-{i // 3}",
            turn=i % 3,
        )
        for i in range(n)
    ]


async def server_truth(url: str) -> dict[str, dict[str, Any]]:
    """What the fake server actually did, per request id."""
    async with aiohttp.ClientSession() as session, session.get(url + "/fixture/truth") as response:
        truth: dict[str, dict[str, Any]] = await response.json()
        return truth


async def steady(
    run: Callable[[int], Awaitable[ReplayRun]], *, good: Callable[[ReplayRun], Awaitable[bool]]
) -> ReplayRun:
    """The first of up to `ATTEMPTS` runs (`run(attempt)`) that is `good`, or in which the client kept up.

    Timing tests compare the client's figures with the truth. A run whose figures are off is only
    excused when the client itself says it fell behind (other processes starving it of CPU): then
    it is tried again, and after `ATTEMPTS` such runs the test fails with the client's reason: a
    timing test that could not time anything has not passed, and a skip would hide that in CI.
    A run that is off although the client kept up is returned, for the test's assertions to fail.
    """
    reason = ""
    for attempt in range(ATTEMPTS):
        result = await run(attempt)
        if not result.fell_behind or await good(result):
            return result
        reason = result.lag.reason
    pytest.fail(f"machine too busy to time: the client fell behind {ATTEMPTS} times ({reason})")
