"""`evertune events tail`: print events from the EVENTS stream as they happen."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from nats.errors import Error as NatsError
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.apps.cli.common import (
    Commands,
    add_data_dir_flag,
    nats_url_for,
    shared_settings,
    stop_on_signals,
)
from evertune.errors import InvalidArgument
from evertune.infra.bus import connect
from evertune.infra.events import EventKind, decode_event, event_filter_subject
from evertune.v1 import events_pb2


def tail_subject(*, endpoint: str | None, kind: str | None) -> str:
    """The subject filter for `--endpoint` and `--kind` (either may be absent)."""
    if kind is not None and kind not in {k.value for k in EventKind}:
        known = ", ".join(k.value for k in EventKind)
        raise InvalidArgument(f"unknown event kind {kind!r}; one of: {known}")
    return event_filter_subject(EventKind(kind) if kind else None, endpoint)


#: Unit of a DriftSignal's values by feature.
_DRIFT_UNITS = {
    "prompt_tokens": " tok",
    "completion_tokens": " tok",
    "rate_rps": " req/s",
    "ttft_ms": " ms",
}
#: What a DriftSignal's score is called, by test.
_SCORE_NAMES = {"ks": "D", "cusum": "S"}


def format_drift(drift: events_pb2.DriftDetected) -> str:
    """A drift.detected as one readable clause per signal: feature, measure, reference -> current
    (relative change), the test with its score against its threshold and the p-value; then the
    reference it was compared with."""
    parts = []
    for s in drift.signals:
        unit = _DRIFT_UNITS.get(s.feature, "")
        measure = f"{s.measure} " if s.measure else ""
        score = f"{_SCORE_NAMES.get(s.statistic, 'z')}={s.score:.3g}"
        if s.threshold:
            score += f" (> {s.threshold:.3g})"
        p_value = f" p={s.p_value:.2g}" if s.HasField("p_value") else ""
        parts.append(
            f"{s.feature} {measure}{s.reference_value:.4g}{unit} -> {s.current_value:.4g}{unit} "
            f"({s.relative_change:+.0%}) by {s.statistic} {score}{p_value}"
        )
    reference = f"profile {drift.reference_profile_id}" if drift.reference_profile_id else "traffic"
    span = drift.reference_window.ToTimedelta().total_seconds()
    return "; ".join(parts) + f" | reference: {reference} ({span:.0f} s)"


def format_search_completed(done: events_pb2.SearchCompleted) -> str:
    """A search.completed as its outcome, counts and winner, then its plain-language summary."""
    outcome = events_pb2.SearchOutcome.Name(done.outcome).removeprefix("SEARCH_OUTCOME_").lower()
    parts = [f"search={done.search_id}", f"outcome={outcome}", f"trials={done.trials}"]
    if done.winner_trial_id:
        parts += [f"winner_trial={done.winner_trial_id}", f"verified={str(done.verified).lower()}"]
    if done.error:
        parts.append(f"error={json.dumps(done.error)}")
    line = " ".join(parts)
    return f"{line} | {done.summary}" if done.summary else line


def format_event(event: events_pb2.Event) -> str:
    """One readable line: time, kind, endpoint, source, then the payload's fields (drift.detected:
    what moved, by how much, and the test; search.completed: its outcome and summary)."""
    payload_field = event.WhichOneof("payload")
    when = event.time.ToDatetime().strftime("%H:%M:%S.%f")[:-3]
    if payload_field == "drift_detected":
        fields = format_drift(event.drift_detected)
    elif payload_field == "search_completed":
        fields = format_search_completed(event.search_completed)
    else:
        payload = MessageToDict(getattr(event, payload_field)) if payload_field else {}
        fields = " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in payload.items())
    return f"{when} {event.kind:<22} {event.endpoint or '-':<16} {event.source:<12} {fields}"


@dataclass
class CauseChain:
    """An event and every later event it caused, directly or through others (`Event.cause_id`):
    a drift, the profile built for it, the search on that profile, the rollout of its winner."""

    ids: set[str]  #: ids of the events in the chain so far (the first one's to start)

    @classmethod
    def of(cls, event_id: str) -> CauseChain:
        """The chain that starts at event `event_id`."""
        return cls(ids={event_id})

    def take(self, event: events_pb2.Event) -> bool:
        """Whether `event` belongs to the chain (its first event, or caused by one in it); taken
        events extend it. Events arrive in stream order, causes before their effects."""
        if event.id in self.ids or event.cause_id in self.ids:
            self.ids.add(event.id)
            return True
        return False


def add_commands(commands: Commands) -> None:
    """`evertune events tail`."""
    events = commands.add_parser("events", help="the event stream")
    events_commands = events.add_subparsers(dest="events_command", required=True, metavar="COMMAND")
    parser = events_commands.add_parser("tail", help="print events as they happen")
    add_data_dir_flag(parser)
    parser.add_argument("--nats-url", default=None, help="read this NATS instead of the data dir's")
    parser.add_argument("--endpoint", default=None, help="only events of this endpoint")
    parser.add_argument("--kind", default=None, help="only events of this kind, e.g. sla.breach")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--all", action="store_true", help="start from the oldest stored event, not from now")
    parser.add_argument("--count", type=int, default=None, help="stop after this many events")
    parser.add_argument(
        "--chain",
        default=None,
        metavar="EVENT_ID",
        help="only this event and every later one its cause chain reaches (drift -> profile.ready -> "
        "search.* -> deploy.*), from the oldest stored",
    )
    parser.set_defaults(func=tail_command)


def tail_command(args: argparse.Namespace) -> int:
    return tail(
        data_dir=args.data_dir,
        nats_url=args.nats_url,
        endpoint=args.endpoint,
        kind=args.kind,
        as_json=args.json,
        from_start=args.all,
        count=args.count,
        chain=args.chain,
    )


def tail(
    *,
    data_dir: Path | None,
    nats_url: str | None,
    endpoint: str | None,
    kind: str | None,
    as_json: bool,
    from_start: bool,
    count: int | None,
    chain: str | None = None,
) -> int:
    """Print events as they come (from the oldest stored with `from_start`). `chain`: only the
    event of that id and the later events its cause chain reaches, read from the oldest stored
    (`kind` then filters what is printed, not what is followed)."""
    shared = shared_settings(data_dir, log_format="console")
    subject = tail_subject(endpoint=endpoint, kind=kind)  # (a bad kind stops here)
    follow = CauseChain.of(chain) if chain else None
    if follow is not None:
        subject = tail_subject(endpoint=endpoint, kind=None)
    url = nats_url_for(shared, nats_url)

    async def main() -> int:
        stop = asyncio.Event()
        stop_on_signals(stop)
        nc = await connect(
            url,
            name="evertune-events-tail",
            connect_timeout_s=shared.connect_timeout_s,
            auth=shared.nats_auth(),
        )
        try:
            js = nc.jetstream()
            policy = DeliverPolicy.ALL if from_start or follow is not None else DeliverPolicy.NEW
            sub = await js.subscribe(
                subject, stream="EVENTS", ordered_consumer=True, config=ConsumerConfig(deliver_policy=policy)
            )

            async def printer() -> None:
                seen = 0
                async for msg in sub.messages:
                    event = decode_event(msg.data, subject=msg.subject)
                    if event is None:
                        print(f"skipped an undecodable message on {msg.subject}", file=sys.stderr)
                        continue
                    if follow is not None and (not follow.take(event) or (kind and event.kind != kind)):
                        continue
                    line = json.dumps(MessageToDict(event)) if as_json else format_event(event)
                    print(line, flush=True)
                    seen += 1
                    if count is not None and seen >= count:
                        return

            printing = asyncio.create_task(printer())
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({printing, stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in (printing, stopping):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            with contextlib.suppress(NatsError):  # the connection closes next anyway
                await sub.unsubscribe()
        finally:
            await nc.close()
        return 0

    return asyncio.run(main())
