"""Cancelling a task so that it ends.

On Python 3.11, `asyncio.wait_for` returns its inner result instead of raising `CancelledError`
when the cancel lands in the same loop iteration as the inner future completes (CPython gh-86296,
fixed in 3.12). nats-py's request/reply goes through `wait_for`, so a task that loops over KV reads
or JetStream calls can miss one `cancel()` and run on; whoever awaits it then waits forever. This
was seen as a test hanging to its timeout after the behaviour under test had happened.

`cancel_and_wait` cancels again until the task has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

#: Seconds a cancelled task has to end before it is cancelled again.
RECANCEL_S = 0.05


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], *, grace_s: float = RECANCEL_S) -> None:
    """Cancel every task of `tasks` and return once all have ended, cancelling again every
    `grace_s` those still running.

    A task whose cancel handling awaits (cleanup) has `grace_s` for it before a repeated cancel
    cuts it short: give such tasks a `grace_s` that covers their cleanup.

    An exception a task ended with stays on it (`task.exception()`) but counts as retrieved, so
    asyncio does not log it. A cancel of the caller itself propagates from its wait; the tasks have
    been cancelled at least once by then."""
    targets = list(tasks)
    pending = {task for task in targets if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=grace_s)
    for task in targets:
        if not task.cancelled():
            task.exception()  # marks it retrieved
