"""Several replicas of one engine config handled as one: start, wait until all are ready, stop.

Shared by `EngineGroup` (vLLM replicas on their own ports) and the runner's replica group (any
engines with these methods, the tests' fakes included)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol


class Replica(Protocol):
    """What these helpers need of an engine."""

    async def start(self) -> None: ...

    async def wait_ready(self, timeout_s: float = 300.0) -> None: ...

    async def stop(self, timeout_s: float = 20.0) -> None: ...


async def start_all(replicas: Sequence[Replica]) -> None:
    """Start each replica in turn (they then load side by side); on a failure stop all and raise."""
    try:
        for replica in replicas:
            await replica.start()
    except BaseException:
        await stop_all(replicas)
        raise


async def wait_all_ready(replicas: Sequence[Replica], timeout_s: float) -> None:
    """Return when every replica is ready; on the first failure stop them all and raise it."""
    tasks = [asyncio.ensure_future(replica.wait_ready(timeout_s)) for replica in replicas]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    failures = [err for task in done if (err := task.exception()) is not None]
    if failures:
        await stop_all(replicas)
        raise failures[0]


async def stop_all(replicas: Sequence[Replica], timeout_s: float = 20.0) -> None:
    """Stop every replica at once."""
    await asyncio.gather(*(replica.stop(timeout_s) for replica in replicas))
