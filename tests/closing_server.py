"""A raw HTTP server that answers as llama.cpp's does after a stream: every request gets a chunked
SSE answer with `Keep-Alive` in its headers, then, a moment later and without reading another
request, the connection is closed. A client that sends its next request at once sends it on a
connection about to close (`evertune/infra/engine_http.py`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from evertune.infra.nats_server import free_port

#: One streamed answer: a content chunk and `[DONE]`.
EVENTS = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Keep-Alive: timeout=5, max=100\r\n\r\n" + f"{len(EVENTS):x}\r\n".encode() + EVENTS + b"\r\n0\r\n\r\n"
)
#: The answer to `GET /v1/models` (a client's preflight): one model, "m".
MODELS_BODY = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
MODELS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    + f"Content-Length: {len(MODELS_BODY)}\r\n\r\n".encode()
    + MODELS_BODY
)
#: How long the server keeps a connection open after its answer, seconds.
CLOSE_AFTER_S = 0.1


@contextlib.asynccontextmanager
async def closing_server() -> AsyncIterator[tuple[str, list[int]]]:
    """(base URL, body length of each POST answered), while the server runs."""
    answered: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length")), 0
        )
        await reader.readexactly(length)
        if lines[0].startswith(b"GET /v1/models"):
            writer.write(MODELS)
        else:
            answered.append(length)
            writer.write(ANSWER)
        await writer.drain()
        await asyncio.sleep(CLOSE_AFTER_S)  # a next request on this connection arrives meanwhile, unread
        writer.close()

    port = free_port()
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        yield f"http://127.0.0.1:{port}", answered
