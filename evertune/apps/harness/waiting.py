"""The one way to wait for a state nobody announces: look at it until it holds (tests, benchmarks).

Where a state change is announced (an event, a future, a NATS message), wait on that instead; this
is for what can only be looked at: a row count in the store, a route weight in a KV bucket, a
process gone.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from evertune.errors import DeadlineExceeded

T = TypeVar("T")

#: Seconds between two looks at the condition, unless the caller says otherwise.
INTERVAL_S = 0.02


@overload
async def eventually(
    check: Callable[[], Awaitable[T | None]], *, timeout_s: float = ..., what: str = ..., every_s: float = ...
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T | None], *, timeout_s: float = ..., what: str = ..., every_s: float = ...
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    *,
    timeout_s: float = 20.0,
    what: str = "the condition",
    every_s: float = INTERVAL_S,
) -> Any:
    """Call `check` (plain or async) every `every_s` until it returns something truthy, and return
    that; raise `DeadlineExceeded` naming `what` when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise DeadlineExceeded(f"{what}: not within {timeout_s:g} s")
        await asyncio.sleep(every_s)
