"""Read-side queries over the `requests` table, for profiles, reports and the watch work.

Every function takes a `Store` and a window `[since, until)` (UTC datetimes) and optionally one
endpoint (None: all endpoints). Percentiles use ClickHouse's `quantiles` (reservoir sampling, exact
up to 8192 values per group, linear interpolation between values); ITL percentiles are over every
inter-token gap of the group's requests (the `-Array` combinator). Latencies are ms.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from evertune.store import Store

#: Percentile levels reported everywhere.
LEVELS = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Percentiles:
    """p50, p90, p99 of one quantity; 0 when there was nothing to measure."""

    p50: float  #: median
    p90: float  #: 90th percentile
    p99: float  #: 99th percentile

    @classmethod
    def of(cls, values: Any) -> Percentiles:
        """From ClickHouse's `quantiles(0.5, 0.9, 0.99)` array (NaN, for no values, becomes 0)."""
        vals = [0.0 if v != v else float(v) for v in values]  # NaN != NaN
        return cls(*vals) if len(vals) == 3 else cls(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class MinuteLatency:
    """Latency percentiles of one endpoint deployment in one minute."""

    minute: datetime  #: start of the minute, UTC
    endpoint: str  #: endpoint name
    deployment: str  #: deployment id ('' when the request never reached one)
    requests: int  #: requests that started in the minute
    ttft_ms: Percentiles  #: client-observed TTFT, of requests that got a first token
    itl_ms: Percentiles  #: inter-token gaps, all of the minute's streamed tokens


@dataclass(frozen=True)
class MinuteRate:
    """Request rate of one endpoint deployment in one minute."""

    minute: datetime  #: start of the minute, UTC
    endpoint: str  #: endpoint name
    deployment: str  #: deployment id
    requests: int  #: requests that started in the minute
    errors: int  #: of which ended with an error class
    rate_per_s: float  #: requests / 60


@dataclass(frozen=True)
class LengthDistribution:
    """Prompt and output lengths of one endpoint's requests, tokens."""

    endpoint: str  #: endpoint name
    requests: int  #: requests in the window
    prompt_tokens: Percentiles  #: prompt length
    cached_tokens: Percentiles  #: prompt tokens served from the prefix cache
    completion_tokens: Percentiles  #: output length
    prompt_mean: float  #: mean prompt length
    completion_mean: float  #: mean output length


@dataclass(frozen=True)
class ErrorCount:
    """How many requests of one endpoint deployment ended with one error class."""

    endpoint: str  #: endpoint name
    deployment: str  #: deployment id
    error_class: str  #: e.g. 'upstream_timeout'
    requests: int  #: requests with that class


_WINDOW = "ts >= {since:DateTime64(6, 'UTC')} AND ts < {until:DateTime64(6, 'UTC')}"
_ENDPOINT = " AND ({endpoint:String} = '' OR endpoint = {endpoint:String})"
_Q = "0.5, 0.9, 0.99"


def _params(since: datetime, until: datetime, endpoint: str | None) -> dict[str, Any]:
    return {"since": since, "until": until, "endpoint": endpoint or ""}


async def latency_per_minute(
    store: Store, since: datetime, until: datetime, *, endpoint: str | None = None
) -> list[MinuteLatency]:
    """TTFT and ITL percentiles per minute, endpoint and deployment, oldest first."""
    sql = f"""
        SELECT toStartOfMinute(ts) AS minute, endpoint, deployment, count() AS n,
               quantilesIf({_Q})(ttft_ms, ttft_ms > 0) AS ttft,
               quantilesArray({_Q})(itl_ms) AS itl
        FROM requests WHERE {_WINDOW}{_ENDPOINT}
        GROUP BY minute, endpoint, deployment ORDER BY minute, endpoint, deployment
    """
    result = await store.query(sql, _params(since, until, endpoint))
    return [
        MinuteLatency(
            minute=minute,
            endpoint=str(ep),
            deployment=str(dep),
            requests=int(n),
            ttft_ms=Percentiles.of(ttft),
            itl_ms=Percentiles.of(itl),
        )
        for minute, ep, dep, n, ttft, itl in result
    ]


async def rate_per_minute(
    store: Store, since: datetime, until: datetime, *, endpoint: str | None = None
) -> list[MinuteRate]:
    """Requests per minute, endpoint and deployment (minutes without requests are absent)."""
    sql = f"""
        SELECT toStartOfMinute(ts) AS minute, endpoint, deployment, count() AS n,
               countIf(error_class != '') AS errors
        FROM requests WHERE {_WINDOW}{_ENDPOINT}
        GROUP BY minute, endpoint, deployment ORDER BY minute, endpoint, deployment
    """
    result = await store.query(sql, _params(since, until, endpoint))
    return [
        MinuteRate(
            minute=minute,
            endpoint=str(ep),
            deployment=str(dep),
            requests=int(n),
            errors=int(errors),
            rate_per_s=int(n) / 60.0,
        )
        for minute, ep, dep, n, errors in result
    ]


async def length_distribution(
    store: Store, since: datetime, until: datetime, *, endpoint: str | None = None
) -> list[LengthDistribution]:
    """Prompt, cached and output length percentiles per endpoint."""
    sql = f"""
        SELECT endpoint, count() AS n,
               quantiles({_Q})(prompt_tokens), quantiles({_Q})(cached_tokens),
               quantiles({_Q})(completion_tokens), avg(prompt_tokens), avg(completion_tokens)
        FROM requests WHERE {_WINDOW}{_ENDPOINT}
        GROUP BY endpoint ORDER BY endpoint
    """
    result = await store.query(sql, _params(since, until, endpoint))
    return [
        LengthDistribution(
            endpoint=str(ep),
            requests=int(n),
            prompt_tokens=Percentiles.of(prompt),
            cached_tokens=Percentiles.of(cached),
            completion_tokens=Percentiles.of(completion),
            prompt_mean=float(prompt_mean),
            completion_mean=float(completion_mean),
        )
        for ep, n, prompt, cached, completion, prompt_mean, completion_mean in result
    ]


async def error_counts(
    store: Store, since: datetime, until: datetime, *, endpoint: str | None = None
) -> list[ErrorCount]:
    """Requests per error class, endpoint and deployment; successes ('') are not listed."""
    sql = f"""
        SELECT endpoint, deployment, error_class, count() AS n
        FROM requests WHERE {_WINDOW}{_ENDPOINT} AND error_class != ''
        GROUP BY endpoint, deployment, error_class ORDER BY endpoint, deployment, n DESC, error_class
    """
    result = await store.query(sql, _params(since, until, endpoint))
    return [ErrorCount(str(ep), str(dep), str(cls), int(n)) for ep, dep, cls, n in result]
