"""Property test of the gateway's JSON bodies (issue 16): random JSON (hypothesis `recursive`),
mutations of a valid chat / completions body (wrong types, huge strings and numbers, missing and
extra fields, unknown models, nested junk) and bytes that are not JSON or not UTF-8, POSTed with a
valid API key to a real gateway whose upstream is the fake engine (tests/fake_engine.py). Never a
5xx; every error is an OpenAI error body with a one-line message; the gateway serves a valid
request after each one and its telemetry publisher keeps running.

Reproducible: `derandomize=True` and no example database (as tests/security/test_fuzz_grpc.py);
`EVERTUNE_FUZZ_EXAMPLES=<n>` and `EVERTUNE_FUZZ_RANDOM=1` explore further by hand."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from nats.aio.client import Client
from pydantic import SecretStr

from evertune.gateway import GatewayService, GatewaySettings
from evertune.infra.bus import Bucket
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings
from evertune.v1 import endpoint_pb2
from tests.domain.replay.conftest import serve
from tests.security.fuzz import fuzz_settings

KEY = "sk-fuzz-tenant-0123456789abcdef"
ENDPOINT = "fuzz-gateway-target"
MAX_BODY = 256 * 1024
#: Longest error message accepted: one line a person reads, not an echo of the body.
MAX_MESSAGE = 1000
FUZZ = fuzz_settings(examples=200)
PATHS = ("/v1/chat/completions", "/v1/completions")


@dataclass
class Gateway:
    url: str
    service: GatewayService
    session: aiohttp.ClientSession


@pytest.fixture(scope="module")
async def gateway(nc: Client, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    # A fake engine of this module's own: junk it is sent must not disturb the session's.
    serving = serve()
    fake_url = next(serving)
    tmp = Path(tmp_path_factory.mktemp("fuzz-gateway"))
    table = endpoint_pb2.RouteTable(
        endpoint=ENDPOINT,
        tenant="fuzz",
        routes=[endpoint_pb2.Route(deployment_id="dep-fuzz", upstream_url=fake_url, weight=1)],
    )
    routes = await Bucket.open(nc.jetstream(), "routes")
    await routes.mutate(ENDPOINT, lambda _: table.SerializeToString())
    settings = GatewaySettings(
        port=0, api_keys=SecretStr(f"{KEY} fuzz"), max_body_bytes=MAX_BODY, spool_path=tmp / "spool.bin"
    )
    service = GatewayService(settings)
    ctx = ServiceContext(shared=SharedSettings(data_dir=tmp), nc=nc, js=nc.jetstream(), store=None)
    await service.start(ctx)
    try:
        async with aiohttp.ClientSession() as session:
            yield Gateway(f"http://127.0.0.1:{service.port}", service, session)
    finally:
        await service.stop(5.0)
        next(serving, None)  # past its yield: the fake engine stops


# --- bodies -------------------------------------------------------------------------------------

_TEXT = st.one_of(
    st.text(max_size=30),
    st.text(st.characters(codec="utf-8", categories=("Cc", "Zl", "Zp", "Mn", "So")), max_size=30),
    st.sampled_from((ENDPOINT, "fake", "", "user", "text", "assistant")),
)
_NUMBERS = st.one_of(
    st.integers(),
    st.sampled_from((2**31, 2**63, 2**64 + 1, -(2**63) - 1, 10**30, -1, 0)),
    st.floats(allow_nan=False, allow_infinity=False),
)
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=12,
)


def valid_body(path: str) -> dict[str, Any]:
    if path == "/v1/chat/completions":
        return {"model": ENDPOINT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return {"model": ENDPOINT, "prompt": "hi", "max_tokens": 2}


_FIELDS = ("model", "messages", "prompt", "max_tokens", "stream", "stream_options", "temperature", "n")


@st.composite
def mutated(draw: st.DrawFn, path: str) -> bytes:
    """A valid body of `path` with fields replaced by junk, dropped or added."""
    body = valid_body(path)
    if draw(st.booleans()):
        body["stream"] = True
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(_FIELDS) | _TEXT)
        action = draw(st.sampled_from(("junk", "drop", "huge", "model", "tokens", "messages")))
        if action == "drop":
            body.pop(field, None)
        elif action == "huge":
            body[field] = "x" * draw(st.sampled_from((70_000, 300_000)))
        elif action == "model":
            body["model"] = draw(_TEXT)
        elif action == "tokens":  # token ids, huge and negative numbers included
            body["prompt"] = draw(st.lists(_NUMBERS, min_size=0, max_size=40))
        elif action == "messages":
            body["messages"] = draw(st.lists(st.dictionaries(st.sampled_from(("role", "content")), JSON)))
        else:
            body[field] = draw(JSON)
    return json.dumps(body).encode()


def _nested(depth: int) -> bytes:
    return ('{"model": "' + ENDPOINT + '", "prompt": ' + "[" * depth + "]" * depth + "}").encode()


RAW = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        (
            b"",
            b"\xff\xfe{}",
            b'{"model": "\xc3\x28"}',  # invalid UTF-8 inside a string
            b'{"model": "' + ENDPOINT.encode() + b'", "max_tokens": 1e999999}',
            b'{"model": "' + ENDPOINT.encode() + b'", "max_tokens": ' + b"9" * 5000 + b"}",
            b"[" * 5000,
            _nested(3000),
            b"NaN",
            b'{"model": NaN}',
        )
    ),
)


def bodies(path: str) -> st.SearchStrategy[bytes]:
    return st.one_of(JSON.map(lambda v: json.dumps(v).encode()), mutated(path), RAW)


# --- the property -------------------------------------------------------------------------------


async def _post(gateway: Gateway, path: str, body: bytes) -> tuple[int, bytes]:
    headers = {
        "Authorization": f"Bearer {KEY}",
        "Content-Type": "application/json",
        "X-Fake": "ttft_ms=1,tokens=2",
    }
    async with gateway.session.post(gateway.url + path, data=body, headers=headers) as response:
        return response.status, await response.read()


async def _check(gateway: Gateway, path: str, body: bytes) -> None:
    status, answer = await _post(gateway, path, body)
    what = f"{status} {answer[:200]!r} for {body[:200]!r}"
    assert status < 500, what
    if status >= 400:
        error = json.loads(answer)["error"]
        message = error["message"]
        assert isinstance(message, str) and message, what
        assert "\n" not in message and "Traceback" not in message and len(message) <= MAX_MESSAGE, what
        assert error["type"], what
    status, answer = await _post(gateway, path, json.dumps(valid_body(path)).encode())
    assert status == 200, answer
    assert gateway.service.state == "running"  # no loop of it (the telemetry publisher) crashed


@FUZZ
@given(body=bodies(PATHS[0]))
@example(body=_nested(3000))  # was a 500: RecursionError out of json.loads
@example(body=json.dumps({"model": "x" * 70_000, "messages": []}).encode())  # was echoed whole
@example(body=json.dumps({"model": "a\nb", "messages": []}).encode())  # was a message of two lines
async def test_chat_bodies_never_answer_5xx(gateway: Gateway, body: bytes) -> None:
    await _check(gateway, PATHS[0], body)


@FUZZ
@given(body=bodies(PATHS[1]))
@example(body=_nested(3000))
@example(body=_nested(900))
@example(body=_nested(980))
# Token ids the prefix hashes cannot pack crashed the telemetry publisher (struct.error).
@example(body=json.dumps({"model": ENDPOINT, "prompt": [2**40] * 300}).encode())
@example(body=json.dumps({"model": ENDPOINT, "prompt": [-1] * 300}).encode())
async def test_completion_bodies_never_answer_5xx(gateway: Gateway, body: bytes) -> None:
    await _check(gateway, PATHS[1], body)
