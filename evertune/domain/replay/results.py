"""What a replay measured: one `RequestResult` per planned request, and the `ReplayRun` around them.

Times are milliseconds (`*_ms`) or seconds after the replay's start (`*_s`, on the client's clock).
No text of a prompt or a completion is ever kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evertune.domain.replay.lag import LagReport

#: "" when the request completed; otherwise what went wrong:
#: connect       no response: connection refused or reset before the response headers
#: timeout       not finished within `timeout_s` of being sent
#: http_4xx      the target answered 4xx (bad request, unknown model, context too long)
#: http_5xx      the target answered 5xx
#: http_other    any other non-200 status
#: stream_broken the stream ended without `[DONE]`, was cut, was not SSE/JSON, or carried an error
#: client_lag    never sent: the in-flight cap stayed full for `timeout_s` after its time
ErrorClass = Literal[
    "", "connect", "timeout", "http_4xx", "http_5xx", "http_other", "stream_broken", "client_lag"
]
ERROR_CLASSES: tuple[ErrorClass, ...] = (
    "connect",
    "timeout",
    "http_4xx",
    "http_5xx",
    "http_other",
    "stream_broken",
    "client_lag",
)


@dataclass(frozen=True)
class RequestResult:
    """What the client saw of one request."""

    request_id: str  #: the plan's request id (also sent as `X-Request-Id`)
    conversation_id: str  #: the plan's conversation id ("" = none)
    scheduled_s: float  #: when it was due, seconds after the replay's start (after rate/time scaling)
    sent_s: float  #: when it actually left, seconds after the replay's start (NaN if never sent)
    lag_ms: float  #: sent - scheduled: the client's own lateness (NaN if never sent)
    ttft_ms: float | None  #: send -> first chunk carrying text (not the role-only chunk); None if none came
    itl_ms: tuple[float, ...]  #: every gap between consecutive chunks carrying text
    e2e_ms: float | None  #: send -> end of the stream (or the error); None if never sent
    prompt_tokens: int | None  #: from the stream's usage chunk; None without one
    completion_tokens: int | None  #: from the stream's usage chunk; None without one
    chunks: int  #: chunks that carried text (one chunk may carry several tokens)
    status: int  #: HTTP status; 0 when no response came
    error_class: ErrorClass  #: "" when it completed, else the class (see `ErrorClass`)
    error: str = ""  #: one line of detail for an error (never any prompt or completion text)
    target: str = ""  #: base URL it was sent to, when the replay spread over several ("" = the one)

    @property
    def ok(self) -> bool:
        return self.error_class == ""

    @property
    def output_tokens(self) -> int:
        """Tokens generated: the usage figure, else the count of text chunks."""
        return self.completion_tokens if self.completion_tokens is not None else self.chunks


@dataclass(frozen=True)
class ReplayRun:
    """One replay of a plan against a target, with the client's own lag."""

    target: str  #: base URL replayed against (without `/v1`); the first when there were several
    model: str  #: model name sent in every request
    rate: float  #: rate multiplier the plan was replayed at
    time_scale: float  #: time compression the plan was replayed at (see `replay`)
    started_at: float  #: wall-clock (Unix) time of the replay's start, for reports
    duration_s: float  #: start -> last request finished, on the client's clock
    results: tuple[RequestResult, ...]  #: one per planned request, in plan order
    lag: LagReport  #: send lag, loop stalls, cap hits, and whether the client fell behind
    peak_in_flight: int  #: most requests in flight at once
    targets: tuple[str, ...] = ()  #: every base URL replayed against, in order (`target` is the first)
    primed: int = 0  #: primers sent before the clock started (`replay(prime=True)`), one a conversation
    prime_failed: int = 0  #: of those, primers that did not complete (their conversations start cold)

    @property
    def fell_behind(self) -> bool:
        return self.lag.fell_behind
