"""What the gateway observes of one request, and the telemetry record built from it (pure).

The proxy fills an `Observation` as the request goes (times on `time.perf_counter`), then
`build_record` turns it into a `RequestRecord`. No text is copied into either: the prompt travels
beside the record (`Pending.prompt`) only as far as the publisher, which hashes it and drops it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from evertune.v1 import telemetry_pb2

#: the client's `model` string is cut to this length in a record (kept only when it named an
#: endpoint: a name that matched none is counted in the metrics, not stored)
MAX_MODEL_CHARS = 200


@dataclass
class Observation:
    """One request as the gateway saw it; times are `perf_counter` seconds."""

    request_id: str  #: gateway-assigned id of the record (unique, what telemetry dedupes on)
    reply_id: str  #: `x-request-id` of the reply: the client's own when it sent one, else `request_id`
    start_time_unix_ns: int  #: wall-clock receipt time, ns since the epoch
    received: float  #: perf_counter at receipt
    api: telemetry_pb2.Api = telemetry_pb2.API_UNSPECIFIED  #: `Api` enum value
    endpoint: str = ""  #: endpoint name, once known to exist
    endpoint_uid: str = ""  #: the endpoint's immutable id, from its route table
    model: str = ""  #: `model` as the client sent it
    stream: bool = False  #: the client asked for a stream
    deployment: str = ""  #: chosen deployment id
    #: HTTP status of the answer: the one sent, or for a stream that failed after its 200 headers
    #: the status its closing error event carries (502, 504)
    status: int = 0
    error_class: str = ""  #: short machine-readable error class; "" = success
    upstream_sent: float | None = None  #: perf_counter when the upstream request left
    upstream_first: float | None = None  #: perf_counter when the first content chunk arrived
    writes: list[float] = field(default_factory=list)  #: perf_counter of each content write
    ended: float | None = None  #: perf_counter of the last byte sent (or the failure)
    prompt_tokens: int = 0  #: from usage
    cached_tokens: int = 0  #: from usage.prompt_tokens_details
    completion_tokens: int = 0  #: from usage
    client_disconnected: bool = False  #: the client went away before the end


def _ms(a: float | None, b: float | None) -> float:
    return (b - a) * 1000.0 if a is not None and b is not None else 0.0


def build_record(obs: Observation) -> telemetry_pb2.RequestRecord:
    """The telemetry record of an observation (prefix hashes are added later by the publisher)."""
    first = obs.writes[0] if obs.writes else None
    return telemetry_pb2.RequestRecord(
        request_id=obs.request_id,
        endpoint=obs.endpoint,
        endpoint_uid=obs.endpoint_uid,
        deployment=obs.deployment,
        start_time_unix_ns=obs.start_time_unix_ns,
        api=obs.api,
        model=obs.model[:MAX_MODEL_CHARS] if obs.endpoint else "",  # a client's unknown name is not kept
        stream=obs.stream,
        status_code=obs.status,
        error_class=obs.error_class,
        ttft_ms=_ms(obs.received, first),
        e2e_ms=_ms(obs.received, obs.ended),
        itl_ms=[(b - a) * 1000.0 for a, b in zip(obs.writes, obs.writes[1:], strict=False)]
        if obs.stream
        else [],
        prompt_tokens=obs.prompt_tokens,
        cached_tokens=obs.cached_tokens,
        completion_tokens=obs.completion_tokens,
        client_disconnected=obs.client_disconnected,
        upstream_ttft_ms=_ms(obs.upstream_sent, obs.upstream_first),
    )


@dataclass(frozen=True)
class Payload:
    """What one SSE `data` payload of an upstream stream says, without its text."""

    done: bool = False  #: the `[DONE]` sentinel
    content: bool = False  #: carries generated text
    usage_only: bool = False  #: the final usage chunk (`choices: []` with `usage`)
    usage: dict[str, Any] | None = None  #: its `usage` object, when it has one
    error: bool = False  #: an in-stream `error` object


def _has_text(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    return isinstance(delta, dict) and bool(
        delta.get("content")
        or delta.get("reasoning_content")
        or delta.get("reasoning")
        or delta.get("tool_calls")
    )


def read_payload(payload: str) -> Payload:
    """Interpret one payload of a chat or completions stream; anything unreadable says nothing."""
    if payload.strip() == "[DONE]":
        return Payload(done=True)
    try:
        body = json.loads(payload)
    except ValueError:
        return Payload()
    if not isinstance(body, dict):
        return Payload()
    if body.get("error"):
        return Payload(error=True)
    choices = body.get("choices")
    content = isinstance(choices, list) and any(_has_text(c) for c in choices)
    usage = body.get("usage")
    if isinstance(usage, dict):
        return Payload(content=content, usage_only=not choices, usage=usage)
    return Payload(content=content)


def apply_usage(obs: Observation, usage: Any) -> None:
    """Copy token counts from an OpenAI `usage` object into the observation."""
    if not isinstance(usage, dict):
        return
    for name, attr in (("prompt_tokens", "prompt_tokens"), ("completion_tokens", "completion_tokens")):
        value = usage.get(name)
        if isinstance(value, int) and value >= 0:
            setattr(obs, attr, value)
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        obs.cached_tokens = max(0, details["cached_tokens"])


#: OpenAI's error `type` for the statuses the gateway answers itself (5xx not listed: "server_error").
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",  # OpenAI answers an unknown model so, with code "model_not_found"
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    """OpenAI's error `type` for an HTTP status: "server_error" for every 5xx."""
    return ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(message: str, *, status: int, code: str | None) -> dict[str, Any]:
    """An OpenAI-style error body (`type` from the status, `error_type`)."""
    return {"error": {"message": message, "type": error_type(status), "param": None, "code": code}}


#: Longest client `X-Request-Id` the gateway echoes back; a longer or unprintable one is replaced.
MAX_CLIENT_REQUEST_ID_CHARS = 128


def client_request_id(header: str | None) -> str | None:
    """The client's `X-Request-Id` when it is usable as a reply header (1-128 printable ASCII
    characters, no spaces); None otherwise (the gateway's own id is used instead)."""
    if not header or len(header) > MAX_CLIENT_REQUEST_ID_CHARS:
        return None
    return header if all("!" <= ch <= "~" for ch in header) else None
