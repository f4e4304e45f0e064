"""Replaying a request trace in the format of the Azure LLM inference traces.

The format (Azure Public Dataset; Splitwise, ISCA 2024): a CSV with a header line
`TIMESTAMP,ContextTokens,GeneratedTokens` and one request a row, e.g.
`2023-11-16 18:17:03.9799600,4808,10`. Columns are found by name (any order, any case; extra
columns are ignored). TIMESTAMP is an ISO date-time (7 fractional digits are fine; a time zone is
converted to UTC, no zone means UTC) or a plain number of seconds.

Replay: request `i` leaves `at_s` seconds after the earliest row (minus the window start), with a
prompt of `ContextTokens` tokens made by the caller's `make_text`, and `max_tokens=GeneratedTokens`.
The trace has no text, so no two prompts share a prefix.

Bad rows (a missing or empty field, a value that is not a number, a token count below 1, a timestamp
earlier than the latest one so far by more than `backwards_tolerance_s`) are named by line number:
`strict=True` raises one `WorkloadError` for the first (and says how many there were); otherwise
they are left out and counted in the `ReadReport`. Rows out of order within the tolerance are kept
and sorted.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.plan import PlannedRequest
from evertune.domain.workloads.report import BadLines, ReadReport
from evertune.domain.workloads.seeding import derive
from evertune.domain.workloads.tags import CLIPPED_FROM, LINE, WORKLOAD
from evertune.domain.workloads.text import MakeText

#: The columns a trace must have (matched without regard to case).
TIMESTAMP, CONTEXT, GENERATED = "TIMESTAMP", "ContextTokens", "GeneratedTokens"


@dataclass(frozen=True)
class TraceRow:
    """One good row of a trace."""

    line: int  #: 1-based line number in the file (the header is line 1)
    t_s: float  #: seconds after the earliest good row
    context_tokens: int  #: prompt length in tokens (ContextTokens)
    generated_tokens: int  #: output length in tokens (GeneratedTokens)


@dataclass(frozen=True)
class TraceLoad:
    """A trace turned into a plan, and what reading it found."""

    plan: list[PlannedRequest]  #: the requests, by `at_s`
    report: ReadReport  #: rows read, bad lines skipped


class _RowError(Exception):
    """A row is bad; the message says why (becomes a `BadLine`)."""


def parse_azure_csv(
    lines: Iterable[str],
    *,
    source: str = "trace",
    strict: bool = False,
    backwards_tolerance_s: float = 1.0,
) -> tuple[list[TraceRow], ReadReport]:
    """The good rows of a trace given as lines of text (sorted by time), and the report of the read.

    A missing or unusable header raises `WorkloadError` whatever `strict` says: nothing can be read.
    """
    numbered = enumerate(lines, start=1)
    header: list[str] | None = None
    for number, text in numbered:
        if text.strip():
            header = next(csv.reader([text.lstrip("\ufeff")]))
            header_line = number
            break
    if header is None:
        raise WorkloadError(f"{source} is empty: it needs the header {TIMESTAMP},{CONTEXT},{GENERATED}")
    names = [name.strip().lower() for name in header]
    try:
        columns = tuple(names.index(name.lower()) for name in (TIMESTAMP, CONTEXT, GENERATED))
    except ValueError:
        raise WorkloadError(
            f"{source} line {header_line}: the header must name {TIMESTAMP}, {CONTEXT} and {GENERATED},"
            f" not {','.join(header)!r}"
        ) from None

    bad = BadLines(source=source)
    rows: list[TraceRow] = []
    clock = _Clock(backwards_tolerance_s)
    for number, text in numbered:
        if not text.strip():
            continue
        try:
            fields = _fields(text)
            stamp, context, generated = (
                _field(fields, index, name)
                for index, name in zip(columns, (TIMESTAMP, CONTEXT, GENERATED), strict=True)
            )
            context_tokens = _tokens(context, CONTEXT)
            generated_tokens = _tokens(generated, GENERATED)
            t_s = clock.seconds(stamp)
        except _RowError as err:
            bad.add(number, str(err))
            continue
        rows.append(
            TraceRow(line=number, t_s=t_s, context_tokens=context_tokens, generated_tokens=generated_tokens)
        )
    report = bad.report(rows=len(rows), strict=strict)
    if rows:
        earliest = min(row.t_s for row in rows)
        rows = sorted((replace(row, t_s=row.t_s - earliest) for row in rows), key=lambda row: row.t_s)
    return rows, report


def plan_rows(
    rows: Iterable[TraceRow],
    *,
    make_text: MakeText,
    seed: int = 0,
    start_s: float = 0.0,
    end_s: float | None = None,
    limit: int | None = None,
    max_context_tokens: int | None = None,
    id_prefix: str = "trace-L",
) -> list[PlannedRequest]:
    """Completions requests for the rows in the window [start_s, end_s) (at most `limit`, earliest first).

    `at_s` counts from `start_s`. A prompt longer than `max_context_tokens` is cut to it (tag
    `clipped_from` keeps the trace's length). Each prompt is `make_text(tokens, rng)` with an rng of
    its own (from `seed` and the line number), so a window or limit does not change the text of the
    rows it keeps. Request ids are `{id_prefix}{line}`; tags hold `workload=trace` and the line.
    """
    if limit is not None and limit < 0:
        raise WorkloadError(f"limit must be >= 0, not {limit}")
    if max_context_tokens is not None and max_context_tokens < 1:
        raise WorkloadError(f"max_context_tokens must be >= 1, not {max_context_tokens}")
    plan: list[PlannedRequest] = []
    for row in sorted(rows, key=lambda row: row.t_s):
        if limit is not None and len(plan) >= limit:
            break
        if row.t_s < start_s or (end_s is not None and row.t_s >= end_s):
            continue
        tokens = row.context_tokens
        tags = {WORKLOAD: "trace", LINE: str(row.line)}
        if max_context_tokens is not None and tokens > max_context_tokens:
            tags[CLIPPED_FROM] = str(tokens)
            tokens = max_context_tokens
        plan.append(
            PlannedRequest(
                at_s=row.t_s - start_s,
                request_id=f"{id_prefix}{row.line}",
                api="completions",
                max_tokens=row.generated_tokens,
                prompt=make_text(tokens, derive(seed, "trace", row.line)),
                prompt_tokens=tokens,
                tags=tags,
            )
        )
    return plan


def read_azure_trace(
    path: str | Path,
    *,
    make_text: MakeText,
    seed: int = 0,
    start_s: float = 0.0,
    end_s: float | None = None,
    limit: int | None = None,
    max_context_tokens: int | None = None,
    strict: bool = False,
    backwards_tolerance_s: float = 1.0,
) -> TraceLoad:
    """Read an Azure-format CSV trace and plan its requests (see `parse_azure_csv` and `plan_rows`)."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8", newline="") as lines:
            rows, report = parse_azure_csv(
                lines, source=path.name, strict=strict, backwards_tolerance_s=backwards_tolerance_s
            )
    except OSError as err:
        raise WorkloadError(f"cannot read trace {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise WorkloadError(f"trace {path} is not UTF-8 text") from None
    plan = plan_rows(
        rows,
        make_text=make_text,
        seed=seed,
        start_s=start_s,
        end_s=end_s,
        limit=limit,
        max_context_tokens=max_context_tokens,
    )
    return TraceLoad(plan=plan, report=report)


def _fields(text: str) -> list[str]:
    try:
        return next(csv.reader([text]))
    except csv.Error as err:
        raise _RowError(f"not a CSV row: {err}") from None


def _field(fields: list[str], index: int, name: str) -> str:
    if index >= len(fields):
        raise _RowError(f"{name} is missing")
    value = fields[index].strip()
    if not value:
        raise _RowError(f"{name} is empty")
    return value


def _tokens(value: str, name: str) -> int:
    try:
        tokens = int(value)
    except ValueError:
        raise _RowError(f"{name} is not a whole number: {value!r}") from None
    if tokens < 1:
        raise _RowError(f"{name} must be at least 1, not {tokens}")
    return tokens


class _Clock:
    """Turns TIMESTAMP fields into seconds after the first good row, and refuses going back in time."""

    def __init__(self, tolerance_s: float) -> None:
        if not tolerance_s >= 0:
            raise WorkloadError(f"backwards_tolerance_s must be >= 0, not {tolerance_s}")
        self._tolerance_s = tolerance_s
        self._origin: float | datetime | None = None
        self._latest = 0.0

    def seconds(self, stamp: str) -> float:
        value = _timestamp(stamp)
        if self._origin is None:
            self._origin = value
        if isinstance(value, datetime) and isinstance(self._origin, datetime):
            t_s = (value - self._origin).total_seconds()
        elif isinstance(value, float) and isinstance(self._origin, float):
            t_s = value - self._origin
        else:
            kind = "a number" if isinstance(value, float) else "a date-time"
            raise _RowError(f"{TIMESTAMP} is {kind}, unlike the first row's: {stamp!r}")
        if t_s < self._latest - self._tolerance_s:
            raise _RowError(
                f"{TIMESTAMP} goes back {self._latest - t_s:.3f} s"
                f" (tolerance {self._tolerance_s:g} s): {stamp!r}"
            )
        self._latest = max(self._latest, t_s)
        return t_s


def _timestamp(stamp: str) -> float | datetime:
    """Seconds (a plain number) or a naive UTC date-time."""
    try:
        number = float(stamp)
    except ValueError:
        pass
    else:
        if not math.isfinite(number):
            raise _RowError(f"{TIMESTAMP} is not finite: {stamp!r}")
        return number
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        raise _RowError(f"{TIMESTAMP} is not a date-time or a number of seconds: {stamp!r}") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment
