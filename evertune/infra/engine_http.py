"""A POST to an engine on a pooled connection, sent once more on a fresh one when the engine had
already closed the pooled one.

llama.cpp's server (cpp-httplib) closes its side of the connection after every streamed answer,
though its headers say `Keep-Alive` (measured on the llama.cpp evertune builds: curl reports
"Connection died, retrying a fresh connect"; others met it too, e.g. LunaTranslator #2510,
obsidian-local-llm-hub #32). aiohttp puts the connection back in its pool and does not retry a
POST, so the next request on it fails at once: `ClientOSError` "Can not write request body" or
`ServerDisconnectedError`. The engine never read that request (it had closed the connection), so
sending it again on a connection of its own is safe, and is what curl does.

A failure to connect at all is not retried (`ClientConnectorError`: the engine is down), nor is
anything after the response began. An engine that dies just after reading a request could see it
twice; it is gone then, so the second send fails to connect.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

import aiohttp


def fresh_session(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """A session like `session` (its timeout, default headers and decompression) whose every
    request opens a connection of its own, for the second send."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True),
        timeout=session.timeout,
        headers=session.headers,
        auto_decompress=session.auto_decompress,
    )


@contextlib.asynccontextmanager
async def post(
    session: aiohttp.ClientSession,
    url: str,
    *,
    data: bytes,
    headers: Mapping[str, str],
    fresh: aiohttp.ClientSession,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """`session.post(url)`, sent again through `fresh` when the pooled connection was closed by
    the engine before it answered (see the module doc)."""
    try:
        response = await session.post(url, data=data, headers=headers)
    except aiohttp.ClientConnectorError:
        raise
    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
        response = await fresh.post(url, data=data, headers=headers)
    async with response:
        yield response
