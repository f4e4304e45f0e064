"""The one way tests wait for a state they cannot be told about: poll it until it holds."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

#: Seconds between two looks at the condition.
INTERVAL_S = 0.02


@overload
async def eventually(
    check: Callable[[], Awaitable[T | None]], *, timeout_s: float = ..., what: str = ...
) -> T: ...


@overload
async def eventually(check: Callable[[], T | None], *, timeout_s: float = ..., what: str = ...) -> T: ...


async def eventually(
    check: Callable[[], Any], *, timeout_s: float = 20.0, what: str = "the condition"
) -> Any:
    """Call `check` (plain or async) until it returns something truthy, and return that; fail
    the test naming `what` when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        await asyncio.sleep(INTERVAL_S)
