"""What the demo shows in the terminal: the SLO panel and one line per loop event. The figures are
plain functions over the sla-monitor's status rows (`evertune.apps.cli.slo.SloRow`, the same figures
as `evertune slo status`) and the bus's events (`evertune.apps.cli.events.format_event`); the panel
is laid out by rich (`slo_panel`), plain text when stdout is not a terminal."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from google.protobuf.json_format import MessageToDict
from rich.console import Group
from rich.padding import Padding
from rich.text import Text

from evertune.apps.cli.console import table
from evertune.apps.cli.events import format_drift, format_event
from evertune.apps.cli.slo import SloRow, burn_text
from evertune.v1 import endpoint_pb2, events_pb2

#: Indent of the line under an event that continues it (a search's summary): past `[  +12.3s] `.
SUMMARY_INDENT = " " * 13

#: The loop's stages, in order: (name, event kinds that show it happened, event kinds that show it
#: only began). A search that started but did not complete during the run did not happen.
STAGES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("profile", ("profile.ready",), ()),
    ("drift", ("drift.detected",), ()),
    ("search", ("search.completed",), ("search.started",)),
    ("verify (trials)", ("trial.completed",), ("trial.progress",)),
    ("deploy (canary)", ("deploy.started", "deploy.canary_step"), ()),
    ("promotion or rollback", ("deploy.promoted", "deploy.rolled_back"), ()),
)


@dataclass(frozen=True)
class DemoEvent:
    """One loop event as the demo saw it."""

    t_s: float  #: seconds after the traffic started (negative: before it)
    kind: str  #: dotted event kind, e.g. "profile.ready"
    endpoint: str  #: endpoint it belongs to
    line: str  #: the readable line printed for it
    payload: dict[str, object] = field(default_factory=dict)  #: the payload as JSON-ready dict
    id: str = ""  #: the event's id
    cause_id: str = ""  #: id of the event that caused it ("" for a root: a drift, a breach, a call)


def demo_event(event: events_pb2.Event, *, t0: float) -> DemoEvent:
    """A bus event on the demo's clock (`t0`: Unix time of the clock's zero)."""
    t_s = event.time.ToDatetime(tzinfo=UTC).timestamp() - t0 if event.HasField("time") else 0.0
    which = event.WhichOneof("payload")
    payload = MessageToDict(getattr(event, which), preserving_proto_field_name=True) if which else {}
    return DemoEvent(
        t_s=t_s,
        kind=event.kind,
        endpoint=event.endpoint,
        line=short_line(event),
        payload=payload,
        id=event.id,
        cause_id=event.cause_id,
    )


def _f(value: float, digits: int = 0) -> str:
    return f"{value:.{digits}f}"


def config_text(config: endpoint_pb2.EngineConfig) -> str:
    """The knobs a configuration sets, as `k=v, ...` ("engine defaults" when none)."""
    knobs = MessageToDict(config, preserving_proto_field_name=True)
    return (
        ", ".join(f"{k}={v}" for k, v in knobs.items() if k not in ("engine", "model")) or "engine defaults"
    )


def _name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower().replace("_", " ")


def short_line(event: events_pb2.Event) -> str:
    """One line a person reads at a glance: the kind, then what matters of its payload. Kinds
    without a short form (and drift.detected, whose line is already readable) use the events tail's
    format, `evertune.apps.cli.events.format_event`, cut to 240 characters."""
    which = event.WhichOneof("payload")
    kind = f"{event.kind:<20}"
    if which == "profile_ready":
        p = event.profile_ready
        m = p.summary
        return (
            f"{kind} profile {p.profile_id} ({p.trigger}): {p.request_count} requests, "
            f"{m.rate_rps:.1f} req/s, prompt p50 {_f(m.prompt_tokens_p50)} tok, "
            f"prefix reuse {m.prefix_reuse_share:.0%}, "
            f"TTFT p50/p99 {_f(m.ttft_p50_ms)}/{_f(m.ttft_p99_ms)} ms; "
            f"bottleneck {p.bottleneck_verdict or '-'}"
        )
    if which == "drift_detected":
        return f"{kind} {format_drift(event.drift_detected)}"
    if which == "search_started":
        q = event.search_started
        return (
            f"{kind} search {q.search_id} on profile {q.profile_id}: {q.candidates} candidates modelled, "
            f"budget {q.trial_budget} real trials on {', '.join(q.hardware_classes)}"
        )
    if which == "search_completed":
        c = event.search_completed
        outcome = _name(events_pb2.SearchOutcome, c.outcome, "SEARCH_OUTCOME_")
        winner = ""
        if c.HasField("winner"):
            winner = f"; winner {config_text(c.winner)} (trial {c.winner_trial_id})"
        error = f"; {c.error}" if c.error and not c.summary else ""
        line = f"{kind} search {c.search_id}: {outcome} after {c.trials} trials{winner}{error}"
        # the searcher's plain-language account, on a line of its own under the event
        return f"{line}\n{SUMMARY_INDENT}{c.summary}" if c.summary else line
    if which == "trial_progress":
        progress = event.trial_progress
        phase = _name(events_pb2.TrialPhase, progress.phase, "TRIAL_PHASE_")
        rate = f" at {progress.rate_rps:.1f} req/s" if progress.rate_rps else ""
        done = f"{progress.rates_done}/{progress.rates_total}"
        return f"{kind} trial {progress.trial_id}: {phase}{rate} (rates {done})"
    if which == "trial_completed":
        t = event.trial_completed
        gates = " ".join(f"{g.name}:{'pass' if g.passed else 'FAIL'}" for g in t.gates) or "no gates"
        verdict = "passed" if t.passed else "failed"
        where = "model" if t.simulated else "hardware"
        error = f"; {t.error[:120]}" if t.error else ""
        return (
            f"{kind} trial {t.trial_id}{' (baseline)' if t.baseline else ''} {verdict} on {where}: "
            f"TTFT p50/p99 {_f(t.ttft_p50_ms)}/{_f(t.ttft_p99_ms)} ms, goodput {t.goodput_rps:.1f} req/s; "
            f"gates {gates}; {config_text(t.engine_config)}{error}"
        )
    if which == "deploy_started":
        d = event.deploy_started
        trigger = _name(events_pb2.DeployTrigger, d.trigger, "DEPLOY_TRIGGER_")
        steps = f", canary steps {list(d.canary_steps)}" if d.canary_steps else ""
        config = config_text(d.engine_config)
        return f"{kind} deployment {d.deployment_id} starting ({trigger}): {config}{steps}"
    if which == "deploy_canary_step":
        step = event.deploy_canary_step
        verdict = _name(events_pb2.CanaryVerdict, step.verdict, "CANARY_VERDICT_")
        return (
            # `weight` is the canary's share after the verdict (a held step keeps its own)
            f"{kind} canary {step.deployment_id} step {step.step + 1} of {step.steps}: {verdict}, "
            f"canary at {step.weight / 100:g}% of traffic; p99 TTFT canary "
            f"{_f(step.canary_ttft_p99_ms)} vs stable {_f(step.stable_ttft_p99_ms)} ms "
            f"({step.canary_requests} canary requests)"
        )
    if which == "deploy_promoted":
        promoted = event.deploy_promoted
        took = promoted.rollout_duration.ToTimedelta().total_seconds()
        before = f" replacing {promoted.previous_deployment_id}" if promoted.previous_deployment_id else ""
        return (
            f"{kind} deployment {promoted.deployment_id} promoted{before} "
            f"({config_text(promoted.engine_config)}; {took:.1f} s)"
        )
    if which == "deploy_rolled_back":
        r = event.deploy_rolled_back
        return f"{kind} deployment {r.deployment_id} rolled back to {r.restored_deployment_id}: {r.reason}"
    if which in ("endpoint_created", "endpoint_updated"):
        e = getattr(event, which).endpoint
        state = _name(endpoint_pb2.EndpointState, e.state, "ENDPOINT_STATE_")
        return f"{kind} endpoint {e.spec.name} {state}"
    line = format_event(event)
    return line if len(line) <= 240 else line[:237] + "..."


def event_line(event: DemoEvent) -> str:
    """`[  +12.3s] <the events tail line>`."""
    return f"[{event.t_s:+7.1f}s] {event.line}"


#: Where the panel's table starts: under the text after `[  +12.3s] `.
PANEL_INDENT = len(SUMMARY_INDENT) - 2


def panel_head(*, t_s: float, phase: str, sent: int, done: int, errors: int) -> str:
    """The panel's first line: the demo's clock, the traffic's phase and counts."""
    return f"[{t_s:+7.1f}s] SLO  phase {phase:<8} sent {sent:>5}  done {done:>5}  errors {errors}"


def panel_rows(rows: list[SloRow]) -> list[SloRow]:
    """The rows the panel shows: the endpoint and each deployment; with one deployment, its row
    alone (it says it all)."""
    deployments = [r for r in rows if r.deployment]
    return deployments if len(deployments) == 1 else rows


def panel_cells(row: SloRow) -> tuple[str, ...]:
    """One row's cells: scope, TTFT p50 and p99 against the target (ms), attainment against its
    target, burn rate per rule (`long/short`, `!` open), requests and window."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    burns = " ".join(f"{rule} {burn_text(b)}" for rule, b in row.burn_rates.items())
    return (
        row.deployment or "(all)",
        ms(row.ttft_p50_ms),
        ms(row.ttft_p99_ms),
        ms(row.ttft_target_ms),
        "-" if row.attainment is None else f"{row.attainment:.3f}",
        "-" if row.attainment_target is None else f"{row.attainment_target:.2f}",
        burns or "-",
        str(row.requests),
        f"{row.window_s:g}",
    )


def slo_panel(rows: list[SloRow], *, t_s: float, phase: str, sent: int, done: int, errors: int) -> Group:
    """The SLO panel: the head line with the traffic, then a table of the endpoint/deployment rows:
    p50/p99 TTFT against the target, attainment against its target, burn rate per rule."""
    head = Text(panel_head(t_s=t_s, phase=phase, sent=sent, done=done, errors=errors), style="bold")
    shown = panel_rows(rows)
    if not shown:
        return Group(head, Padding("(the sla-monitor has not seen traffic yet)", (0, 0, 0, PANEL_INDENT)))
    grid = table(
        "scope",
        "TTFT p50 ms",
        "p99 ms",
        "target ms",
        "attainment",
        "target",
        "burn long/short",
        "requests",
        "window s",
        right=(1, 2, 3, 4, 5, 7, 8),
    )
    for row in shown:
        cells = panel_cells(row)
        over = (
            row.attainment < row.attainment_target
            if row.attainment is not None and row.attainment_target is not None
            else row.ttft_p99_ms is not None
            and row.ttft_target_ms is not None
            and row.ttft_p99_ms > row.ttft_target_ms
        )
        grid.add_row(*cells, style="red" if over else None)
    return Group(head, Padding(grid, (0, 0, 0, PANEL_INDENT), expand=False))


@dataclass(frozen=True)
class StageVerdict:
    """Whether one loop stage happened during the run."""

    stage: str  #: stage name (see STAGES)
    happened: bool  #: at least one of its events was seen
    events: int  #: its events seen
    first_t_s: float | None  #: when the first was seen, seconds after the traffic started
    note: str  #: one line for the report


def loop_events(events: list[DemoEvent], *, since_s: float, initial_deployment: str) -> list[DemoEvent]:
    """The events the loop produced: from `since_s` (the traffic's start) on, without those of the
    endpoint's first deployment (provisioning is not a rollout of the loop)."""
    return [
        e
        for e in events
        if e.t_s >= since_s
        and not (
            e.kind.startswith("deploy.")
            and initial_deployment
            and e.payload.get("deployment_id") == initial_deployment
        )
    ]


def _why_no_rollout(events: list[DemoEvent]) -> str:
    outcomes = []
    for e in events:
        if e.kind != "search.completed":
            continue
        outcome = str(e.payload.get("outcome", "")).removeprefix("SEARCH_OUTCOME_").lower().replace("_", " ")
        if outcome == "winner" and not e.payload.get("verified", False):
            outcome = "winner not verified on real hardware"
        outcomes.append(outcome)
    if not outcomes:
        return "no search completed during the run"
    counts = ", ".join(f"{o} x{outcomes.count(o)}" for o in dict.fromkeys(outcomes))
    return f"searches completed with: {counts}"


def stage_verdicts(events: list[DemoEvent]) -> list[StageVerdict]:
    """Which stages of the loop happened, from the events seen (never assumed); pass the loop's
    events (`loop_events`)."""
    verdicts = []
    for stage, kinds, begun_kinds in STAGES:
        seen = [e for e in events if e.kind in kinds]
        begun = [e for e in events if e.kind in begun_kinds]
        if seen:
            counts = ", ".join(
                f"{k} x{sum(e.kind == k for e in seen)}" for k in kinds if any(e.kind == k for e in seen)
            )
            note = f"seen: {counts}"
        else:
            note = f"did not happen: no {' / '.join(kinds)} event during the run"
            if begun:
                note += f"; it began ({begun[0].kind} at +{begun[0].t_s:.0f} s) but did not finish"
            elif stage.startswith(("deploy", "promotion")):
                note += f" ({_why_no_rollout(events)})"
        verdicts.append(
            StageVerdict(
                stage=stage,
                happened=bool(seen),
                events=len(seen),
                first_t_s=min(e.t_s for e in seen) if seen else None,
                note=note,
            )
        )
    return verdicts
