"""cancel_and_wait against the cancel that Python 3.11's `asyncio.wait_for` swallows."""

from __future__ import annotations

import asyncio
import sys

import pytest

from evertune.infra.runtime.tasks import cancel_and_wait


async def _looping_over_wait_for(futures: list[asyncio.Future[int]]) -> None:
    """A loop like a KV poller's: every turn awaits a reply through `wait_for` (as nats-py does)."""
    loop = asyncio.get_running_loop()
    while True:
        fut: asyncio.Future[int] = loop.create_future()
        futures.append(fut)
        await asyncio.wait_for(fut, 5.0)


async def _cancel_as_the_reply_lands(task: asyncio.Task[None], futures: list[asyncio.Future[int]]) -> None:
    await asyncio.sleep(0)  # the task now waits inside wait_for
    futures[-1].set_result(1)  # its reply completes in the same loop iteration as ...
    task.cancel()  # ... the cancel


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps the cancel from 3.12 on")
async def test_one_cancel_is_lost_when_the_reply_lands_with_it() -> None:
    futures: list[asyncio.Future[int]] = []
    task = asyncio.create_task(_looping_over_wait_for(futures))
    await _cancel_as_the_reply_lands(task, futures)
    await asyncio.sleep(0.05)
    assert not task.done()  # the loop went on: a plain `await task` would wait forever
    await cancel_and_wait([task])


async def test_cancel_and_wait_ends_a_task_whose_cancel_was_lost() -> None:
    futures: list[asyncio.Future[int]] = []
    task = asyncio.create_task(_looping_over_wait_for(futures))
    await _cancel_as_the_reply_lands(task, futures)
    await asyncio.wait_for(cancel_and_wait([task]), 5.0)
    assert task.cancelled()


async def test_an_exception_is_kept_on_the_task_and_done_tasks_are_left_as_they_are() -> None:
    async def failing_on_cancel() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    async def done_already() -> int:
        return 7

    finished = asyncio.create_task(done_already())
    await finished
    failing = asyncio.create_task(failing_on_cancel())
    await asyncio.sleep(0)
    await cancel_and_wait([failing, finished])
    assert isinstance(failing.exception(), RuntimeError)
    assert finished.result() == 7
