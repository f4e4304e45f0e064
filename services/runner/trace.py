"""What a trial replays: a job's `trace_uri` turned into plans at a request rate.

Two kinds of trace:

- `voice:` (optionally `voice:key=value&key=value` with `VoiceWorkload` fields, e.g.
  `voice:agents=2&system_prompt_words=400`): the synthetic voice agent on a flat daily curve. A
  rate is reached with more or fewer calls (think times stay real), and each run draws its own
  calls from the run's seed.
- `file:///abs/path.jsonl` or `.csv` (evertune JSONL or Azure CSV): the recorded timing,
  compressed or stretched in time to the rate; each run gets its own text (same prompt shapes and
  prefix structure) from the run's seed, so a later run does not hit the prefix cache on a whole
  earlier prompt. The file's SHA-256 is checked against the job's `trace_sha256` when one is given.

- `clickhouse://<database>/profiles?profile_id=<id>` (what the profiler announces in
  `profile.ready`): the trace the profiler stored with that profile, the `trace_jsonl` column of its
  row in `profiles` (evertune JSONL, no text). The runner reads it from its store (`StoredTrace`,
  `TraceLookup`) and replays it exactly as the same lines in a `.jsonl` file; the text's SHA-256 is
  checked against the stored one and against the job's `trace_sha256` when one is given. An empty
  database (`clickhouse:///profiles?profile_id=<id>`) means the runner store's own.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, unquote, urlsplit

from evertune.domain.replay import plan_rps
from evertune.domain.workloads import DailyCurve, PlannedRequest, VoiceWorkload, WordListText, plan_voice
from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.jsonl import TraceRecord, parse_jsonl, plan_records, read_jsonl
from evertune.domain.workloads.seeding import derive
from evertune.domain.workloads.source import CorpusText, load_workload, tokens_text
from evertune.domain.workloads.text import MakeText
from evertune.errors import InvalidArgument
from evertune.infra.file_hash import sha256_of

#: The profiler's table of profiles and their traces (infra/clickhouse/0002_profiles.sql).
PROFILES_TABLE = "profiles"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TraceUnavailable(InvalidArgument):
    """The job's trace cannot be read, or is not the one the searcher meant."""


@dataclass(frozen=True)
class RunPlan:
    """The requests of one replay run and the rate multiplier that plays them at the asked rate."""

    plan: list[PlannedRequest]  #: requests by send time
    multiplier: float  #: `replay(rate=...)`: at_s / multiplier is the send time


@dataclass(frozen=True)
class StoredTraceRef:
    """A trace held in the store: the profile whose `profiles` row carries it."""

    database: str  #: ClickHouse database of the `profiles` table ("" = the runner store's own)
    profile_id: str  #: the profile (ProfileReady.profile_id)


@dataclass(frozen=True)
class StoredTrace:
    """A stored trace as read from its row."""

    jsonl: str  #: the trace, evertune JSONL (one record a line)
    sha256: str  #: SHA-256 (hex) the profiler stored beside it


#: Reads a stored trace (None: no such profile in that database).
TraceLookup = Callable[[StoredTraceRef], Awaitable[StoredTrace | None]]


def stored_trace_ref(uri: str) -> StoredTraceRef | None:
    """The profile a `clickhouse://<database>/profiles?profile_id=<id>` URI names; None for any
    other scheme. Raises `TraceUnavailable` (one line) for a malformed one."""
    parts = urlsplit(uri)
    if parts.scheme != "clickhouse":
        return None
    database = parts.netloc
    ids = parse_qs(parts.query).get("profile_id", [])
    if parts.path.strip("/") != PROFILES_TABLE or len(ids) != 1 or not ids[0]:
        raise TraceUnavailable(
            f"trace {uri!r}: a stored trace is clickhouse://<database>/{PROFILES_TABLE}?profile_id=<id>"
        )
    if database and not _IDENTIFIER.match(database):
        raise TraceUnavailable(f"trace {uri!r}: {database!r} is not a ClickHouse database name")
    return StoredTraceRef(database=database, profile_id=ids[0])


def _run_seed(seed: int, *parts: object) -> int:
    return derive(seed, *parts).randrange(2**31)


class TraceSource:
    """Makes the plan of each run of a trial from one trace."""

    def __init__(
        self,
        *,
        voice: VoiceWorkload | None = None,
        path: Path | None = None,
        records: list[TraceRecord] | None = None,
        name: str = "",
        model_dir: Path,
    ) -> None:
        self._voice = voice
        self._path = path
        self._records = records
        self._name = name or str(path)
        self._model_dir = model_dir
        self._make_text: MakeText | None = None

    @property
    def kind(self) -> str:
        if self._voice is not None:
            return "voice"
        return "file" if self._path is not None else "store"

    def run(self, *, rate_rps: float, duration_s: float, seed: int, run: str) -> RunPlan:
        """The plan of run `run` (e.g. "r2.1" or "warmup-r2") at `rate_rps` for `duration_s` seconds."""
        run_seed = _run_seed(seed, run)
        if self._voice is not None:
            # The rate one call a second makes, from a plan long enough to say (plans are cheap).
            probe = self._voice.model_copy(update={"duration_s": max(duration_s, 300.0), "seed": run_seed})
            calls_per_rps = probe.peak_calls_per_s / plan_rps(plan_voice(probe, text=WordListText()))
            base = probe.model_copy(
                update={"duration_s": duration_s, "peak_calls_per_s": rate_rps * calls_per_rps}
            )
            plan = plan_voice(base, text=CorpusText())
            if len(plan) < 2:
                raise TraceUnavailable(
                    f"voice traffic of {duration_s:g} s at {rate_rps:g} rps has under 2 requests"
                )
            return RunPlan(plan=plan, multiplier=rate_rps / plan_rps(plan))
        if self._records is not None:
            # The same planning `load_workload` gives a .jsonl file, from the lines in memory, for
            # the records the run reaches only: a record's text depends on the earlier records of
            # its conversation alone, all of which come before the cut, so the run's requests are
            # the same as when the whole trace is planned and then cut (which took 3.7 s of text
            # making per run on a 10-minute trace, four times a trial).
            if self._make_text is None:
                self._make_text = tokens_text(self._model_dir)
            multiplier = rate_rps / plan_rps(self._records)
            reached = [r for r in self._records if r.at_s / multiplier < duration_s]
            cut = plan_records(reached, make_text=self._make_text, seed=run_seed)
        else:
            assert self._path is not None
            plan = load_workload(
                str(self._path), duration_s=None, seed=run_seed, rate_scale=1.0, tokenizer_dir=self._model_dir
            ).plan
            multiplier = rate_rps / plan_rps(plan)
            cut = [r for r in plan if r.at_s / multiplier < duration_s]
        if len(cut) < 2:
            raise TraceUnavailable(
                f"trace {self._name} has fewer than 2 requests in {duration_s:g} s at {rate_rps:g} rps"
            )
        return RunPlan(plan=cut, multiplier=multiplier)


def _voice(query: str) -> VoiceWorkload:
    settings: dict[str, object] = {"curve": DailyCurve(shape="flat")}
    for key, value in parse_qsl(query, keep_blank_values=True):
        settings[key] = value
    try:
        return VoiceWorkload.parse(settings)
    except WorkloadError as err:
        raise TraceUnavailable(str(err)) from None


def open_trace(uri: str, *, sha256: str, model_dir: Path, stored: StoredTrace | None = None) -> TraceSource:
    """The trace of a job (blocking: reads and hashes a file). `stored` is the row's trace of a
    `clickhouse://` URI, read by the caller. Raises `TraceUnavailable` (one line)."""
    if uri == "voice" or uri.startswith("voice:"):
        return TraceSource(voice=_voice(uri.partition(":")[2]), model_dir=model_dir)
    ref = stored_trace_ref(uri)
    if ref is not None:
        if stored is None:
            raise TraceUnavailable(f"trace {uri!r}: the stored trace was not read")
        return _stored_source(ref, stored, sha256=sha256, model_dir=model_dir)
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise TraceUnavailable(
            f"trace {uri!r}: this runner reads voice:, file:// and clickhouse:// traces only"
        )
    path = Path(unquote(parts.path))
    if path.suffix not in (".jsonl", ".csv"):
        raise TraceUnavailable(f"trace {uri!r} is neither .jsonl nor .csv")
    if not path.is_file():
        raise TraceUnavailable(f"trace {path} not found on this runner")
    if sha256 and sha256_of(path) != sha256:
        raise TraceUnavailable(f"trace {path} does not have the SHA-256 the job names ({sha256[:12]}...)")
    if path.suffix == ".jsonl":  # read once; each run plans only the records it reaches
        return _records_source(
            lambda: read_jsonl(path), label=f"trace {path}", path=path, model_dir=model_dir
        )
    return TraceSource(path=path, model_dir=model_dir)


def _records_source(
    read: Callable[[], tuple[list[TraceRecord], object]],
    *,
    label: str,
    model_dir: Path,
    name: str = "",
    path: Path | None = None,
) -> TraceSource:
    """A source over the records `read` returns (at least 2); `label` names the trace in errors."""
    try:
        records, _ = read()
    except WorkloadError as err:
        raise TraceUnavailable(str(err)) from None
    if len(records) < 2:
        raise TraceUnavailable(f"{label} has {len(records)} requests (2 needed)")
    return TraceSource(path=path, records=records, name=name, model_dir=model_dir)


def _stored_source(ref: StoredTraceRef, stored: StoredTrace, *, sha256: str, model_dir: Path) -> TraceSource:
    name = f"of profile {ref.profile_id}"
    digest = hashlib.sha256(stored.jsonl.encode("utf-8")).hexdigest()
    if stored.sha256 and digest != stored.sha256.lower():
        raise TraceUnavailable(f"the stored trace {name} does not match its stored SHA-256")
    if sha256 and digest != sha256:
        raise TraceUnavailable(
            f"the stored trace {name} does not have the SHA-256 the job names ({sha256[:12]}...)"
        )
    return _records_source(
        lambda: parse_jsonl(stored.jsonl.splitlines(), source=f"trace {name}"),
        label=f"the stored trace {name}",
        name=name,
        model_dir=model_dir,
    )
