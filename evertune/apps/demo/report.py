"""The demo's report: a markdown page and PNG plots in the data dir.

- `ttft_over_time.png`: every request's client TTFT over the run, a rolling p50/p99, the SLO target,
  and the loop's events marked where they happened;
- `ttft_before_after.png`: the TTFT distribution before and after (see `before_after`);
- `trials.png`: the trials on a speed (p50 TTFT) vs quality (correctness agreement) chart, drawn
  only when trials ran.

`summarize` is pure (figures from a `DemoRun`); `write_report` draws and writes.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evertune.apps.demo.driver import DemoRun, RequestPoint
from evertune.apps.demo.panel import DemoEvent, StageVerdict, stage_verdicts
from evertune.apps.demo.traffic import BASELINE, SHIFTED
from evertune.domain.percentiles import percentile

#: Event kinds marked on the TTFT plot, with their colours.
MARKED = {
    "profile.ready": "tab:blue",
    "drift.detected": "tab:orange",
    "search.started": "tab:purple",
    "search.completed": "tab:purple",
    "deploy.started": "tab:green",
    "deploy.promoted": "tab:green",
    "deploy.rolled_back": "tab:red",
    "sla.breach": "tab:red",
}


@dataclass(frozen=True)
class Figures:
    """TTFT figures of a set of requests."""

    label: str  #: what the set is
    requests: int  #: requests sent in it
    completed: int  #: of which completed
    ttft_p50_ms: float | None  #: median client TTFT, ms
    ttft_p99_ms: float | None  #: 99th-percentile client TTFT, ms
    attainment: float | None  #: share of sent requests with TTFT at or under the target
    good_rps: float | None  #: requests meeting the TTFT target per second of the set's span


@dataclass(frozen=True)
class Trial:
    """One completed trial, from its trial.completed event."""

    trial_id: str  #: trial id
    config: str  #: its engine configuration, short
    ttft_p50_ms: float | None  #: p50 TTFT at the target rate, ms
    agreement: float | None  #: correctness gate's value (None: gate not run)
    passed: bool  #: passed every gate
    simulated: bool  #: measured on the performance model, not real hardware
    baseline: bool  #: the live configuration's trial
    ttft_p99_ms: float | None = None  #: p99 TTFT at the target rate, ms
    attainment: float | None = None  #: share of requests within the SLO at the target rate


@dataclass(frozen=True)
class Reference:
    """One configuration as a search's trials measured it, replaying the traffic it was asked for:
    how the live configuration, vLLM's defaults and the winner compare in the same run."""

    search_id: str  #: the search whose trials these are
    label: str  #: "live configuration", "vLLM's defaults", "winner" (or both of the last two)
    config: str  #: its engine configuration, short
    trials: int  #: trials of it the medians are over
    ttft_p50_ms: float | None  #: median of the trials' p50 TTFT, ms
    ttft_p99_ms: float | None  #: median of the trials' p99 TTFT, ms
    attainment: float | None  #: median of the trials' attainment


def figures(points: list[RequestPoint], *, label: str, target_ms: float) -> Figures:
    """Client-side TTFT figures of `points`."""
    sent = [p for p in points if p.sent]
    ttfts = [p.ttft_ms for p in sent if p.ok and p.ttft_ms is not None]
    good = sum(1 for p in sent if p.ok and p.ttft_ms is not None and p.ttft_ms <= target_ms)
    span = (max(p.sent_t_s for p in sent) - min(p.sent_t_s for p in sent)) if len(sent) > 1 else 0.0
    return Figures(
        label=label,
        requests=len(sent),
        completed=sum(p.ok for p in sent),
        ttft_p50_ms=percentile(ttfts, 50) if ttfts else None,
        ttft_p99_ms=percentile(ttfts, 99) if ttfts else None,
        attainment=good / len(sent) if sent else None,
        good_rps=good / span if span > 0 else None,
    )


def first_event(events: list[DemoEvent], kind: str, *, after_s: float = -math.inf) -> DemoEvent | None:
    """The first event of `kind` at or after `after_s`."""
    return next((e for e in events if e.kind == kind and e.t_s >= after_s), None)


def before_after(run: DemoRun) -> tuple[Figures, Figures]:
    """Before: the baseline traffic. After: requests sent after the last promotion when one
    happened; otherwise the shifted traffic (the endpoint still on its first configuration);
    otherwise the second half of the run."""
    target = run.ttft_target_ms
    promoted = [e for e in run.loop_events if e.kind == "deploy.promoted"]
    base = [p for p in run.points if p.phase == BASELINE]
    if promoted:
        at = promoted[-1].t_s
        after = [p for p in run.points if p.sent_t_s >= at]
        before = [
            p for p in run.points if p.sent_t_s < at and p.phase == (after[0].phase if after else BASELINE)
        ]
        return (
            figures(before or base, label="before the promotion (same traffic)", target_ms=target),
            figures(after, label=f"after the promotion at +{at:.0f} s", target_ms=target),
        )
    shifted = [p for p in run.points if p.phase == SHIFTED]
    if shifted:
        return (
            figures(base, label="before the shift", target_ms=target),
            figures(shifted, label="after the shift (first configuration still serving)", target_ms=target),
        )
    half = (run.traffic_start_s or 0.0) + (run.traffic.duration_s / 2 if run.traffic else 0.0)
    return (
        figures([p for p in base if p.sent_t_s < half], label="first half", target_ms=target),
        figures([p for p in base if p.sent_t_s >= half], label="second half", target_ms=target),
    )


def by_phase(run: DemoRun) -> list[Figures]:
    """The run cut where the endpoint's situation changed: before the shift; after it on the first
    configuration (the breach); during the first rollout (canary and stable both serving); after
    the last promotion. A cut that did not happen (no shift, no rollout) is left out, and so is
    a window without requests."""
    target = run.ttft_target_ms
    shift_at = (
        (run.traffic_start_s or 0.0) + run.traffic.shift_at_s
        if run.traffic is not None and run.traffic.shift_at_s is not None
        else math.inf
    )
    started = first_event(run.loop_events, "deploy.started", after_s=shift_at)
    promoted = [e for e in run.loop_events if e.kind == "deploy.promoted" and e.t_s >= shift_at]
    rollout_at = started.t_s if started is not None else math.inf
    promoted_at = promoted[-1].t_s if promoted else math.inf
    cuts = [
        ("before the shift", -math.inf, shift_at),
        ("after the shift, first configuration", shift_at, rollout_at),
        ("during the rollout", rollout_at, promoted_at),
        (f"after the promotion at +{promoted_at:.0f} s", promoted_at, math.inf),
    ]
    rows = []
    for label, lo, hi in cuts:
        points = [p for p in run.points if lo <= p.sent_t_s < hi]
        if points and lo < hi:
            rows.append(figures(points, label=label, target_ms=target))
    return rows


def trials_of(events: list[DemoEvent]) -> list[Trial]:
    """The trials reported by trial.completed events."""
    trials = []
    for e in events:
        if e.kind != "trial.completed":
            continue
        p: dict[str, Any] = e.payload
        gates = {g.get("name"): g for g in p.get("gates", []) if isinstance(g, dict)}
        agreement = gates.get("correctness", {}).get("value")
        config = p.get("engine_config") or {}
        short = ", ".join(f"{k}={v}" for k, v in config.items() if k not in ("engine", "model")) or "defaults"
        metrics = p.get("metrics") or {}
        trials.append(
            Trial(
                trial_id=str(p.get("trial_id", "")),
                config=short,
                ttft_p50_ms=p.get("ttft_p50_ms", metrics.get("ttft_p50_ms")),
                agreement=float(agreement) if agreement is not None else None,
                passed=bool(p.get("passed", False)),
                simulated=bool(p.get("simulated", False)),
                baseline=bool(p.get("baseline", False)),
                ttft_p99_ms=p.get("ttft_p99_ms", metrics.get("ttft_p99_ms")),
                attainment=metrics.get("attainment"),
            )
        )
    return trials


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return percentile(known, 50) if known else None


def references(events: list[DemoEvent]) -> list[Reference]:
    """For each search that measured vLLM's defaults (`defaults_trial_id` of its search.completed):
    the live configuration, the defaults and the winner, each the median over its passing trials."""
    trials = trials_of(events)
    out: list[Reference] = []
    for e in events:
        if e.kind != "search.completed" or not e.payload.get("defaults_trial_id"):
            continue
        search_id = str(e.payload.get("search_id", ""))
        mine = [t for t in trials if t.trial_id.startswith(f"{search_id}-") and t.passed]
        by_id = {t.trial_id: t for t in mine}
        defaults = by_id.get(str(e.payload["defaults_trial_id"]))
        winner = by_id.get(str(e.payload.get("winner_trial_id", "")))
        live = [t for t in mine if t.baseline]
        groups: list[tuple[str, list[Trial]]] = [("live configuration", live)]
        if defaults is not None:
            label = "vLLM's defaults" + (
                " (the winner)" if winner and winner.config == defaults.config else ""
            )
            groups.append((label, [t for t in mine if t.config == defaults.config and not t.baseline]))
        if winner is not None and (defaults is None or winner.config != defaults.config):
            groups.append(("winner", [t for t in mine if t.config == winner.config and not t.baseline]))
        for label, group in groups:
            if group:
                out.append(
                    Reference(
                        search_id=search_id,
                        label=label,
                        config=group[0].config,
                        trials=len(group),
                        ttft_p50_ms=_median([t.ttft_p50_ms for t in group]),
                        ttft_p99_ms=_median([t.ttft_p99_ms for t in group]),
                        attainment=_median([t.attainment for t in group]),
                    )
                )
    return out


def cause_chain(events: list[DemoEvent], last: DemoEvent) -> list[DemoEvent]:
    """The events that led to `last`, root first, following each event's `cause_id` back through
    the events the demo saw (a cause it did not see ends the chain)."""
    by_id = {e.id: e for e in events if e.id}
    chain = [last]
    while chain[-1].cause_id in by_id and len(chain) <= len(by_id):
        chain.append(by_id[chain[-1].cause_id])
    return chain[::-1]


def promotion_causes(run: DemoRun) -> list[str]:
    """The kinds of the events that caused the loop's last promotion, root first (for example
    drift.detected, profile.ready, search.completed, deploy.promoted); empty without one."""
    promoted = [e for e in run.loop_events if e.kind == "deploy.promoted"]
    return [e.kind for e in cause_chain(run.events, promoted[-1])] if promoted else []


def summarize(run: DemoRun) -> dict[str, Any]:
    """The report's figures as JSON-ready data (also written as report.json)."""
    before, after = before_after(run)
    verdicts = stage_verdicts(run.loop_events)
    trials = trials_of(run.events)
    searches = [e.payload for e in run.events if e.kind == "search.completed"]
    return {
        "engine": run.engine,
        "endpoint": run.endpoint,
        "ttft_target_ms": run.ttft_target_ms,
        "requests_sent": run.sent,
        "telemetry_rows": run.telemetry_rows,
        "lost_records": run.lost_records,
        "panels": run.panels,
        "events": [
            {"t_s": round(e.t_s, 3), "kind": e.kind, "id": e.id, "cause_id": e.cause_id} for e in run.events
        ],
        "promotion_causes": promotion_causes(run),
        "stages": [asdict(v) for v in verdicts],
        "before": asdict(before),
        "after": asdict(after),
        "phases": [asdict(f) for f in by_phase(run)],
        "alerts": [{"t_s": round(a.t_s, 3), "kind": a.kind} for a in run.alerts],
        "trials": [asdict(t) for t in trials],
        "references": [asdict(r) for r in references(run.events)],
        "searches": [
            {
                "search_id": p.get("search_id", ""),
                "outcome": str(p.get("outcome", "")).removeprefix("SEARCH_OUTCOME_").lower(),
                "trials": p.get("trials", 0),
                "winner_trial_id": p.get("winner_trial_id", ""),
                "error": p.get("error", ""),
                # what the winner changed, the noise rule's verdict, how the model ranked
                "summary": p.get("summary", ""),
            }
            for p in searches
        ],
        "load_sizing": None if run.sizing is None else asdict(run.sizing),
        "launch_dtype": None if run.launch_dtype is None else asdict(run.launch_dtype),
        "real_trials": sum(1 for t in trials if not t.simulated),
        "notes": list(run.notes),
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _markdown(run: DemoRun, summary: dict[str, Any], plots: list[str]) -> str:
    verdicts = [StageVerdict(**v) for v in summary["stages"]]
    before, after = Figures(**summary["before"]), Figures(**summary["after"])
    traffic = run.traffic
    lines = [
        f"# evertune demo report: endpoint `{run.endpoint}` ({run.engine})",
        "",
        f"- engine: **{run.engine}**"
        + (
            " (evertune's performance model of vLLM's scheduler, not real vLLM)"
            if run.engine == "sim"
            else ""
        ),
        f"- SLO: TTFT <= {run.ttft_target_ms:g} ms for {run.attainment_target:.0%} of requests"
        + (f", p50 <= {run.ttft_p50_target_ms:g} ms" if run.ttft_p50_target_ms else ""),
    ]
    missing = [v.stage for v in verdicts if not v.happened]
    lines.insert(
        1,
        f"\n**Stages that did not happen in this run: {', '.join(missing)}.**\n"
        if missing
        else "\nEvery stage of the loop happened in this run.\n",
    )
    if run.start_note:
        lines.append(f"- first configuration: {run.start_note}")
    if traffic is not None:
        shift = (
            f"; at +{traffic.shift_at_s:g} s it shifted to {traffic.shifted.system_prompt_words} "
            f"prompt words and {traffic.shifted.peak_calls_per_s:g} calls/s"
            if traffic.shifted is not None and traffic.shift_at_s is not None
            else "; no shift (--no-drift)"
        )
        lines.append(
            f"- traffic: voice workload, {traffic.baseline.peak_calls_per_s:g} calls/s, "
            f"{traffic.baseline.system_prompt_words} shared prompt words, {traffic.duration_s:g} s{shift}"
        )
    if run.sizing is not None:
        lines.append(f"- {run.sizing.line()}")
    lost = "not counted" if run.lost_records is None else str(run.lost_records)
    lines += [
        f"- requests sent through the gateway: {run.sent}; telemetry rows stored: "
        f"{run.telemetry_rows if run.telemetry_rows is not None else '-'}; lost records: {lost}",
        "",
        "## The loop's stages",
        "",
        "Read from the events the services published during the run; a stage without events did not happen.",
        "",
        "| stage | happened | first at | events |",
        "|---|---|---|---|",
    ]
    for v in verdicts:
        when = "-" if v.first_t_s is None else f"+{v.first_t_s:.1f} s"
        lines.append(f"| {v.stage} | {'yes' if v.happened else '**no**'} | {when} | {v.note} |")
    if summary["promotion_causes"]:
        lines += [
            "",
            "The last promotion's causes, by the events' cause ids (`evertune events tail --chain ID`): "
            + " → ".join(summary["promotion_causes"])
            + ".",
        ]
    lines += [
        "",
        "## TTFT by phase (client-observed, through the gateway)",
        "",
        "| | requests | completed | p50 ms | p99 ms | within target | good req/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in [Figures(**row) for row in summary["phases"]] or [before, after]:
        attain = "-" if f.attainment is None else f"{f.attainment:.3f}"
        good = "-" if f.good_rps is None else f"{f.good_rps:.2f}"
        lines.append(
            f"| {f.label} | {f.requests} | {f.completed} | {_ms(f.ttft_p50_ms)} | {_ms(f.ttft_p99_ms)} "
            f"| {attain} | {good} |"
        )
    refs = [Reference(**r) for r in summary["references"]]
    if refs:
        lines += [
            "",
            "## vLLM's defaults beside them (the search's trials, replaying the traffic it profiled)",
            "",
            "Medians over each configuration's passing trials; the trial engine shares the machine with "
            "the serving endpoint, so compare these rows with each other, not with the table above.",
            "",
            "| search | configuration | trials | p50 ms | p99 ms | attainment |",
            "|---|---|---|---|---|---|",
        ]
        for r in refs:
            attain = "-" if r.attainment is None else f"{r.attainment:.3f}"
            lines.append(
                f"| {r.search_id} | {r.label}: {r.config} | {r.trials} | {_ms(r.ttft_p50_ms)} "
                f"| {_ms(r.ttft_p99_ms)} | {attain} |"
            )
    lines += ["", "## Alerts delivered to the local webhook", ""]
    lines += [f"- +{a.t_s:.1f} s: {a.line}" for a in run.alerts] or ["None arrived."]
    trials = [Trial(**t) for t in summary["trials"]]
    lines += ["", "## Trials", ""]
    if trials:
        lines += [
            "| # | trial | configuration | p50 TTFT ms | agreement | passed | measured on |",
            "|---|---|---|---|---|---|---|",
        ]
        for number, t in enumerate(trials, start=1):
            agreement = "-" if t.agreement is None else f"{t.agreement:.3f}"
            lines.append(
                f"| {number} | {t.trial_id}{' (baseline)' if t.baseline else ''} | {t.config} "
                f"| {_ms(t.ttft_p50_ms)} "
                f"| {agreement} | {'yes' if t.passed else 'no'} | {'model' if t.simulated else 'hardware'} |"
            )
    else:
        lines.append("No trial ran (no trial.completed event), so there is no speed vs quality chart.")
    if summary["searches"]:
        lines += ["", "## Searches", "", "| search | outcome | trials | winner trial |", "|---|---|---|---|"]
        for q in summary["searches"]:
            outcome = q["outcome"].replace("_", " ") + (f" ({q['error']})" if q["error"] else "")
            lines.append(f"| {q['search_id']} | {outcome} | {q['trials']} | {q['winner_trial_id'] or '-'} |")
        lines += [""] + [f"- `{q['search_id']}`: {q['summary']}" for q in summary["searches"] if q["summary"]]
    progress = sum(e.kind == "trial.progress" for e in run.events)
    lines += ["", f"## Events (trial.progress left out: {progress} of them)", "", "```"]
    lines += [f"{e.t_s:+8.1f}s {e.line}" for e in run.events if e.kind != "trial.progress"] or ["(none)"]
    lines += ["```"]
    if run.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in run.notes]
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _rolling(points: list[RequestPoint], q: float, window_s: float) -> tuple[list[float], list[float]]:
    ok = sorted((p.sent_t_s, p.ttft_ms) for p in points if p.ok and p.ttft_ms is not None)
    xs: list[float] = []
    ys: list[float] = []
    if not ok:
        return xs, ys
    t, end = ok[0][0] + window_s, ok[-1][0]
    lo = 0
    while t <= end + window_s / 2:
        while lo < len(ok) and ok[lo][0] < t - window_s:
            lo += 1
        window = [v for s, v in ok[lo:] if s <= t]
        if window:
            xs.append(t)
            ys.append(percentile(window, q))
        t += window_s / 4
    return xs, ys


def _plot_ttft(run: DemoRun, path: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    fig, ax = plt.subplots(figsize=(11, 5))
    for phase, colour in ((BASELINE, "tab:gray"), (SHIFTED, "tab:brown")):
        pts = [
            (p.sent_t_s, p.ttft_ms) for p in run.points if p.phase == phase and p.ok and p.ttft_ms is not None
        ]
        if pts:
            ax.scatter(
                [x for x, _ in pts],
                [y for _, y in pts],
                s=4,
                alpha=0.35,
                color=colour,
                label=f"requests ({phase})",
            )
    span = (run.traffic.duration_s if run.traffic else 60.0) / 12
    for q, style in ((50, "-"), (99, "--")):
        xs, ys = _rolling(run.points, q, max(span, 2.0))
        if xs:
            ax.plot(xs, ys, style, color="black", linewidth=1.3, label=f"rolling p{q}")
    target = f"target {run.ttft_target_ms:g} ms ({run.attainment_target:.0%} of requests)"
    ax.axhline(run.ttft_target_ms, color="red", linewidth=1, label=target)
    if run.traffic and run.traffic.shift_at_s is not None and run.traffic_start_s is not None:
        ax.axvline(
            run.traffic_start_s + run.traffic.shift_at_s,
            color="tab:brown",
            linestyle=":",
            label="traffic shift",
        )
    labelled: set[str] = set()
    for e in run.loop_events:
        marked = MARKED.get(e.kind)
        if marked is None:
            continue
        label = "_nolegend_" if e.kind in labelled else e.kind
        ax.axvline(e.t_s, color=marked, alpha=0.7, linewidth=1, label=label)
        labelled.add(e.kind)
    ax.set_xlabel("seconds since the stack was ready")
    ax.set_ylabel("client TTFT (ms)")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.set_title(f"TTFT over the run: endpoint {run.endpoint} ({run.engine})")
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_before_after(run: DemoRun, before: Figures, after: Figures, path: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    promoted = [e for e in run.loop_events if e.kind == "deploy.promoted"]
    base = [p for p in run.points if p.phase == BASELINE]
    if promoted:
        at = promoted[-1].t_s
        sets = [[p for p in run.points if p.sent_t_s < at], [p for p in run.points if p.sent_t_s >= at]]
    elif any(p.phase == SHIFTED for p in run.points):
        sets = [base, [p for p in run.points if p.phase == SHIFTED]]
    else:
        half = sorted(p.sent_t_s for p in base)[len(base) // 2] if base else 0.0
        sets = [[p for p in base if p.sent_t_s < half], [p for p in base if p.sent_t_s >= half]]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for pts, fig_, colour in zip(sets, (before, after), ("tab:gray", "tab:green"), strict=True):
        values = sorted(p.ttft_ms for p in pts if p.ok and p.ttft_ms is not None)
        if values:
            ys = [(i + 1) / len(values) for i in range(len(values))]
            ax.step(
                values,
                ys,
                where="post",
                color=colour,
                label=f"{fig_.label} (p50 {_ms(fig_.ttft_p50_ms)}, p99 {_ms(fig_.ttft_p99_ms)} ms)",
            )
    ax.axvline(run.ttft_target_ms, color="red", linewidth=1, label="target")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("client TTFT (ms)")
    ax.set_ylabel("share of requests")
    ax.set_title("TTFT distribution before and after")
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_trials(trials: list[Trial], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for number, t in enumerate(trials, start=1):
        if t.ttft_p50_ms is None:
            continue
        y = t.agreement if t.agreement is not None else 1.0
        marker = "*" if t.baseline else "o"
        face = ("tab:green" if t.passed else "tab:red") if t.agreement is not None else "none"
        ax.scatter(
            [t.ttft_p50_ms],
            [y],
            s=90 if t.baseline else 40,
            marker=marker,
            facecolors=face,
            edgecolors="tab:green" if t.passed else "tab:red",
        )
        # numbered as in the report's trial table (configurations are too long to print here)
        offset = (4, 4 + 8 * (number % 3))
        ax.annotate(str(number), (t.ttft_p50_ms, y), fontsize=8, xytext=offset, textcoords="offset points")
    ax.set_xlabel("p50 TTFT at the target rate (ms), lower is faster")
    ax.set_ylabel("correctness agreement (hollow: not checked)")
    ax.set_title("Trials: speed vs quality (green: every gate passed; star: baseline; # as in the report)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(run: DemoRun, out_dir: Path) -> Path:
    """Write report.md, report.json and the plots into `out_dir`; the markdown's path."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(run)
    before, after = before_after(run)
    plots = ["ttft_over_time.png", "ttft_before_after.png"]
    _plot_ttft(run, out_dir / plots[0])
    _plot_before_after(run, before, after, out_dir / plots[1])
    trials = trials_of(run.events)
    if any(t.ttft_p50_ms is not None for t in trials):
        plots.append("trials.png")
        _plot_trials(trials, out_dir / "trials.png")
    (out_dir / "report.json").write_text(json.dumps(summary, indent=2) + "\n")
    path = out_dir / "report.md"
    path.write_text(_markdown(run, summary, plots))
    return path
