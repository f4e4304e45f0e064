"""A throwaway bus for benchmarks: an embedded nats-server with evertune's streams and buckets, in a
temporary folder that is removed afterwards."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.infra.bus import connect, declare, load_definitions
from evertune.infra.nats_server import EmbeddedNats


@dataclass(frozen=True)
class ScratchBus:
    """What a benchmark gets inside `scratch_bus`."""

    folder: Path  #: the temporary folder (NATS store under `nats/`); free for the benchmark's own files
    url: str  #: the server's client URL, for processes the benchmark starts
    nc: Client  #: a connection to the server
    js: JetStreamContext  #: JetStream on it, streams and buckets declared


@asynccontextmanager
async def scratch_bus(name: str) -> AsyncIterator[ScratchBus]:
    """Start the server, connect as `name`, declare; close, stop and remove everything after."""
    with tempfile.TemporaryDirectory(prefix="evertune-bench-") as tmp:
        folder = Path(tmp)
        server = EmbeddedNats(folder / "nats")
        await server.start()
        try:
            nc = await connect(server.url, name=name)
            try:
                js = nc.jetstream()
                await declare(js, load_definitions())
                yield ScratchBus(folder=folder, url=server.url, nc=nc, js=js)
            finally:
                await nc.close()
        finally:
            await server.stop()
