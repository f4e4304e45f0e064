"""Waiting helpers of the reliability tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> float:
    """Wait until `condition()` holds; return the seconds it took; fail naming `what` after `timeout_s`."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, f"{what}: not within {timeout_s} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def until_async(condition: Callable[[], Awaitable[bool]], *, timeout_s: float, what: str) -> float:
    """`until` for a condition that must query something (polled every 50 ms)."""
    start = time.monotonic()
    while not await condition():
        assert time.monotonic() - start < timeout_s, f"{what}: not within {timeout_s} s"
        await asyncio.sleep(0.05)
    return time.monotonic() - start
