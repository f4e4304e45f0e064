"""What goes on the wire for a planned request: the URL and the JSON body (pure)."""

from __future__ import annotations

import json
from typing import Any

from evertune.domain.workloads.plan import PlannedRequest
from evertune.errors import InvalidArgument

API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}  #: api -> path
MODELS_PATH = "/v1/models"


def base_url(target: str) -> str:
    """`http://host:port` from what a user may write: a trailing `/` or `/v1` is dropped."""
    url = target.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise InvalidArgument(f"target must be an http:// or https:// URL, got {target!r}")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def request_body(request: PlannedRequest, *, model: str, ignore_eos: bool = False) -> dict[str, Any]:
    """The streaming request for one planned request: usage included, `max_tokens` asked for.

    An answer ends at the model's end of turn or at `max_tokens`, whichever comes first: a voice
    turn's answer is as long as the model makes it, up to the cap (evertune's random-weight models
    never end a turn, so theirs are always `max_tokens` long). `ignore_eos` is vLLM's extension that
    keeps generating past an end-of-sequence token, for an output of exactly the planned length; a
    target that does not know it ignores or rejects it.
    """
    body: dict[str, Any] = {"model": model}
    if request.api == "chat":
        body["messages"] = [{"role": m.role, "content": m.content} for m in request.messages]
    elif request.api == "completions":
        body["prompt"] = request.prompt
    else:
        raise InvalidArgument(f"request {request.request_id}: unknown api {request.api!r}")
    body["max_tokens"] = request.max_tokens
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True
    return body


def encode_body(request: PlannedRequest, *, model: str, ignore_eos: bool = False) -> bytes:
    """`request_body` as compact UTF-8 JSON."""
    body = request_body(request, model=model, ignore_eos=ignore_eos)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
