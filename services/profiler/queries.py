"""Read-side queries over the `requests` table, for profiles, reports and the watch work.

Every function takes a `Store` and a window `[since, until)` (UTC datetimes) and optionally one
endpoint (None: all endpoints) and one endpoint id (`endpoint_uid`, None: every id). The profile
queries (`window_aggregates`, `request_samples`) take one endpoint and its id, and read only the rows
recorded under that id (`endpoint = name AND endpoint_uid = uid`): a name deleted and created again
has a new id, and the new endpoint's profile never mixes in the old one's requests.
`newest_endpoint_uid` and `newest_uids` say which id a name's newest request was recorded under.

Rows recorded before endpoints had ids (migration 0006) have `endpoint_uid` '' and belong to no id:
a query with a (non-empty) id never returns them; only the id '' selects them.

Percentiles use ClickHouse's `quantiles` (reservoir sampling, exact up to 8192 values per group,
linear interpolation between values); ITL percentiles are over every inter-token gap of the group's
requests (the `-Array` combinator). Latencies are ms.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from evertune.infra.store import Store
from evertune.profiler.profile import (
    EMPTY_AGGREGATES,
    HISTOGRAM_BINS,
    Distribution,
    RequestSample,
    WindowAggregates,
    nice_width,
)

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
_ENDPOINT = (
    " AND ({endpoint:String} = '' OR endpoint = {endpoint:String})"
    " AND ({any_uid:UInt8} = 1 OR endpoint_uid = {endpoint_uid:String})"
)
_Q = "0.5, 0.9, 0.99"


def _params(
    since: datetime, until: datetime, endpoint: str | None, endpoint_uid: str | None = None
) -> dict[str, Any]:
    return {
        "since": since,
        "until": until,
        "endpoint": endpoint or "",
        "any_uid": int(endpoint_uid is None),
        "endpoint_uid": endpoint_uid or "",
    }


async def latency_per_minute(
    store: Store,
    since: datetime,
    until: datetime,
    *,
    endpoint: str | None = None,
    endpoint_uid: str | None = None,
) -> list[MinuteLatency]:
    """TTFT and ITL percentiles per minute, endpoint and deployment, oldest first."""
    sql = f"""
        SELECT toStartOfMinute(ts) AS minute, endpoint, deployment, count() AS n,
               quantilesIf({_Q})(ttft_ms, ttft_ms > 0) AS ttft,
               quantilesArray({_Q})(itl_ms) AS itl
        FROM requests WHERE {_WINDOW}{_ENDPOINT}
        GROUP BY minute, endpoint, deployment ORDER BY minute, endpoint, deployment
    """
    result = await store.query(sql, _params(since, until, endpoint, endpoint_uid))
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
    store: Store,
    since: datetime,
    until: datetime,
    *,
    endpoint: str | None = None,
    endpoint_uid: str | None = None,
) -> list[MinuteRate]:
    """Requests per minute, endpoint and deployment (minutes without requests are absent)."""
    sql = f"""
        SELECT toStartOfMinute(ts) AS minute, endpoint, deployment, count() AS n,
               countIf(error_class != '') AS errors
        FROM requests WHERE {_WINDOW}{_ENDPOINT}
        GROUP BY minute, endpoint, deployment ORDER BY minute, endpoint, deployment
    """
    result = await store.query(sql, _params(since, until, endpoint, endpoint_uid))
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
    store: Store,
    since: datetime,
    until: datetime,
    *,
    endpoint: str | None = None,
    endpoint_uid: str | None = None,
) -> list[LengthDistribution]:
    """Prompt, cached and output length percentiles per endpoint."""
    sql = f"""
        SELECT endpoint, count() AS n,
               quantiles({_Q})(prompt_tokens), quantiles({_Q})(cached_tokens),
               quantiles({_Q})(completion_tokens), avg(prompt_tokens), avg(completion_tokens)
        FROM requests WHERE {_WINDOW}{_ENDPOINT}
        GROUP BY endpoint ORDER BY endpoint
    """
    result = await store.query(sql, _params(since, until, endpoint, endpoint_uid))
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
    store: Store,
    since: datetime,
    until: datetime,
    *,
    endpoint: str | None = None,
    endpoint_uid: str | None = None,
) -> list[ErrorCount]:
    """Requests per error class, endpoint and deployment; successes ('') are not listed."""
    sql = f"""
        SELECT endpoint, deployment, error_class, count() AS n
        FROM requests WHERE {_WINDOW}{_ENDPOINT} AND error_class != ''
        GROUP BY endpoint, deployment, error_class ORDER BY endpoint, deployment, n DESC, error_class
    """
    result = await store.query(sql, _params(since, until, endpoint, endpoint_uid))
    return [ErrorCount(str(ep), str(dep), str(cls), int(n)) for ep, dep, cls, n in result]


# --- workload profiles ------------------------------------------------------------------------

#: One endpoint's rows under one endpoint id (never another incarnation's, nor '' rows for an id).
_ONE_ENDPOINT = "endpoint = {endpoint:String} AND endpoint_uid = {endpoint_uid:String} AND " + _WINDOW


def _distribution(
    quantile_values: Any, mean: Any, largest: Any, count: int, width: float, bins: Any
) -> Distribution:
    levels = Percentiles.of(quantile_values)
    counts = {int(b): int(n) for b, n in bins}
    return Distribution(
        count=count,
        mean=float(mean) if count else 0.0,
        p50=levels.p50,
        p90=levels.p90,
        p99=levels.p99,
        max=float(largest) if count else 0.0,
        bin_width=width,
        histogram=tuple(counts.get(k, 0) for k in range(max(counts) + 1)) if counts else (),
    )


async def window_aggregates(
    store: Store,
    endpoint: str,
    since: datetime,
    until: datetime,
    *,
    endpoint_uid: str,
    bins: int = HISTOGRAM_BINS,
) -> WindowAggregates:
    """Figures over every request of one endpoint, recorded under the endpoint id `endpoint_uid`,
    in `[since, until)`, aggregated in ClickHouse.

    Quantiles are `quantiles` (exact up to 8192 values, then a reservoir sample); histograms count
    exactly, in bins of `nice_width(max)`.
    """
    params = {"since": since, "until": until, "endpoint": endpoint, "endpoint_uid": endpoint_uid}
    sql = f"""
        SELECT count(), toUnixTimestamp64Micro(min(ts)), toUnixTimestamp64Micro(max(ts)),
               countIf(error_class != ''),
               quantiles({_Q})(prompt_tokens), avg(prompt_tokens), max(prompt_tokens),
               quantiles({_Q})(completion_tokens), avg(completion_tokens), max(completion_tokens),
               sum(cached_tokens), sum(prompt_tokens),
               quantilesIf(0.5, 0.99)(ttft_ms, ttft_ms > 0), quantilesArray(0.99)(itl_ms)
        FROM requests WHERE {_ONE_ENDPOINT}
    """
    row = (await store.query(sql, params))[0]
    n = int(row[0])
    if n == 0:
        return EMPTY_AGGREGATES
    (_, first_us, last_us, errors, pq, pmean, pmax, cq, cmean, cmax, cached, prompt, ttft, itl) = row
    prompt_width, completion_width = nice_width(float(pmax), bins), nice_width(float(cmax), bins)
    histograms = await store.query(
        f"""
        SELECT 'p', intDiv(prompt_tokens, {{pw:UInt32}}) AS b, count() FROM requests
        WHERE {_ONE_ENDPOINT} GROUP BY b
        UNION ALL
        SELECT 'c', intDiv(completion_tokens, {{cw:UInt32}}) AS b, count() FROM requests
        WHERE {_ONE_ENDPOINT} GROUP BY b
        """,
        {**params, "pw": int(prompt_width), "cw": int(completion_width)},
    )
    minutes = await store.query(
        f"""
        SELECT intDiv(toUnixTimestamp64Micro(ts) - {{first:Int64}}, 60000000) AS k, count() FROM requests
        WHERE {_ONE_ENDPOINT} GROUP BY k ORDER BY k
        """,
        {**params, "first": int(first_us)},
    )
    per_minute = {int(k): int(c) for k, c in minutes}
    ttft_values = [0.0 if v != v else float(v) for v in ttft]
    itl_values = [0.0 if v != v else float(v) for v in itl]
    return WindowAggregates(
        requests=n,
        first_s=int(first_us) / 1e6,
        last_s=int(last_us) / 1e6,
        minute_counts=tuple(per_minute.get(k, 0) for k in range(max(per_minute) + 1)),
        prompt_tokens=_distribution(
            pq, pmean, pmax, n, prompt_width, [(b, c) for kind, b, c in histograms if kind == "p"]
        ),
        completion_tokens=_distribution(
            cq, cmean, cmax, n, completion_width, [(b, c) for kind, b, c in histograms if kind == "c"]
        ),
        cached_share=int(cached) / int(prompt) if int(prompt) else 0.0,
        errors=int(errors),
        ttft_p50_ms=ttft_values[0],
        ttft_p99_ms=ttft_values[1],
        itl_p99_ms=itl_values[0],
    )


async def request_samples(
    store: Store, endpoint: str, since: datetime, until: datetime, *, endpoint_uid: str, limit: int
) -> list[RequestSample]:
    """The most recent `limit` requests of one endpoint under the endpoint id `endpoint_uid` in
    `[since, until)`, oldest first, with their prefix chains (a contiguous span, so conversations
    and cache reuse within it stay whole)."""
    sql = f"""
        SELECT request_id, toUnixTimestamp64Micro(ts), e2e_ms, ttft_ms, upstream_ttft_ms,
               prompt_tokens, cached_tokens, completion_tokens,
               if(length(itl_ms) > 0, arrayAvg(itl_ms), 0), api, prefix_hashes, error_class != ''
        FROM requests WHERE {_ONE_ENDPOINT}
        ORDER BY ts DESC, request_id DESC LIMIT {{limit:UInt64}}
    """
    params = {
        "since": since,
        "until": until,
        "endpoint": endpoint,
        "endpoint_uid": endpoint_uid,
        "limit": limit,
    }
    result = await store.query(sql, params)
    samples = [
        RequestSample(
            request_id=str(rid),
            start_s=int(us) / 1e6,
            e2e_ms=float(e2e),
            ttft_ms=float(ttft),
            upstream_ttft_ms=float(upstream),
            prompt_tokens=int(prompt),
            cached_tokens=int(cached),
            completion_tokens=int(completion),
            itl_mean_ms=float(itl),
            api=str(api),
            prefix_hashes=tuple(int(h) for h in hashes),
            failed=bool(failed),
        )
        for rid, us, e2e, ttft, upstream, prompt, cached, completion, itl, api, hashes, failed in result
    ]
    samples.reverse()
    return samples


async def endpoint_seen(store: Store, endpoint: str, *, endpoint_uid: str | None = None) -> bool:
    """Whether the `requests` table holds any request of `endpoint` (at any time); with
    `endpoint_uid`, any recorded under that endpoint id."""
    result = await store.query(
        "SELECT count() > 0 FROM (SELECT 1 FROM requests WHERE endpoint = {endpoint:String}"
        " AND ({any_uid:UInt8} = 1 OR endpoint_uid = {endpoint_uid:String}) LIMIT 1)",
        {"endpoint": endpoint, "any_uid": int(endpoint_uid is None), "endpoint_uid": endpoint_uid or ""},
    )
    return bool(result.scalar())


async def active_endpoints(store: Store, since: datetime, until: datetime) -> list[str]:
    """Endpoints with at least one request in `[since, until)`, by name."""
    result = await store.query(
        f"SELECT DISTINCT endpoint FROM requests WHERE {_WINDOW} ORDER BY endpoint",
        {"since": since, "until": until},
    )
    return [str(e) for (e,) in result]


async def newest_uids(store: Store, since: datetime, until: datetime) -> dict[str, str]:
    """Every endpoint name with requests in `[since, until)` -> the endpoint id its newest request
    there was recorded under (`argMax(endpoint_uid, ts)`), by name. A name deleted and created
    again within the window answers the new endpoint's id."""
    result = await store.query(
        f"SELECT endpoint, argMax(endpoint_uid, ts) FROM requests WHERE {_WINDOW} "
        "GROUP BY endpoint ORDER BY endpoint",
        {"since": since, "until": until},
    )
    return {str(e): str(uid) for e, uid in result}


async def newest_endpoint_uid(
    store: Store, endpoint: str, since: datetime | None = None, until: datetime | None = None
) -> str | None:
    """The endpoint id the newest request of `endpoint` in `[since, until)` (both None: at any
    time) was recorded under; None when there is no such request. '' is an id too: the newest
    request was recorded before endpoints had ids."""
    params: dict[str, Any] = {"endpoint": endpoint}
    window = ""
    if since is not None and until is not None:
        window, params = f" AND {_WINDOW}", {**params, "since": since, "until": until}
    result = await store.query(
        "SELECT argMax(endpoint_uid, ts), count() FROM requests "
        f"WHERE endpoint = {{endpoint:String}}{window}",
        params,
    )
    uid, n = result[0]
    return str(uid) if int(n) else None
