"""Hand-made `RequestResult`s for the pure tests."""

from __future__ import annotations

from evertune.domain.replay.results import ErrorClass, RequestResult


def result(
    *,
    ttft_ms: float | None = 100.0,
    itl_ms: tuple[float, ...] = (),
    error_class: ErrorClass = "",
    scheduled_s: float = 0.0,
    lag_ms: float = 0.5,
    e2e_ms: float | None = None,
    completion_tokens: int | None = None,
    request_id: str = "r",
) -> RequestResult:
    """A result; e2e defaults to TTFT plus the gaps, tokens to the chunk count."""
    chunks = 0 if ttft_ms is None else len(itl_ms) + 1
    if e2e_ms is None:
        e2e_ms = (ttft_ms or 0.0) + sum(itl_ms)
    return RequestResult(
        request_id=request_id,
        conversation_id="",
        scheduled_s=scheduled_s,
        sent_s=scheduled_s + lag_ms / 1000.0,
        lag_ms=lag_ms,
        ttft_ms=ttft_ms,
        itl_ms=itl_ms,
        e2e_ms=e2e_ms,
        prompt_tokens=None,
        completion_tokens=completion_tokens,
        chunks=chunks,
        status=200 if not error_class else 500,
        error_class=error_class,
    )
