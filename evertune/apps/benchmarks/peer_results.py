"""What the peers of `bench peers` measured, read from their own output, and how their engine time
is counted: pure functions over the sweep's per-combination `summary.json` runs, vllm-optimizer's
`result.json`, and the server log the `vllm` shim writes (`vllm_cli.SERVERS_LOG`).

A peer's picks are matched back to evertune's candidates by the flags that vary between them
(`match_key`), so that one judge can measure every arm's pick with evertune's own trials.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evertune.apps.benchmarks.peer_configs import ParamValue, PeerGrid
from evertune.domain.slo import Slo

#: The order in which a person sweeping by hand changes knobs: those vLLM's optimization docs name
#: first (the step budget, the sequence limit, prefix caching), then the CPU ones (dtype, KV block
#: size). A knob not named here comes last.
DOCS_KNOB_ORDER = (
    "max_num_batched_tokens",
    "max_num_seqs",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "dtype",
    "block_size",
)


@dataclass(frozen=True)
class PeerTrial:
    """One configuration a peer measured, as it measured it."""

    params: dict[str, ParamValue]  #: the flags it served (`_` spelling); {} when it did not say
    p50_ttft_ms: float | None  #: its own p50 TTFT (the median over its repeats), ms
    p90_ttft_ms: float | None  #: its own p90 TTFT, ms (the sweep's; None from the optimizer)
    goodput_rps: float | None  #: requests a second served within the TTFT target
    ok: bool  #: it measured the configuration (the server started and the runs completed)


@dataclass(frozen=True)
class PeerOutcome:
    """A peer's trials in the order it ran them, and the one it chose."""

    trials: list[PeerTrial]  #: in the order run
    pick: int | None  #: index in `trials` of its chosen configuration (None: it chose none)
    #: its own measurement called the pick better than vLLM's defaults (None: it did not measure both)
    claims_better: bool | None
    how: str  #: how the pick was made, for the report


def sweep_order(grid: PeerGrid, *, defaults: Mapping[str, ParamValue]) -> list[int]:
    """Indices of `grid.serve_params` in the order a person sweeps them: vLLM's defaults first,
    then one knob changed at a time in `DOCS_KNOB_ORDER`, then two, and so on."""

    def rank(params: Mapping[str, ParamValue]) -> tuple[int, list[int]]:
        changed = [name for name, value in params.items() if defaults.get(name) != value]
        positions = sorted(_position(name) for name in changed)
        return len(changed), positions

    return sorted(range(len(grid.serve_params)), key=lambda i: rank(grid.serve_params[i]))


def _position(name: str) -> int:
    return DOCS_KNOB_ORDER.index(name) if name in DOCS_KNOB_ORDER else len(DOCS_KNOB_ORDER)


def sweep_outcome(
    combinations: Iterable[Sequence[Mapping[str, Any]]],
    *,
    names: Sequence[str],
    defaults: Mapping[str, ParamValue],
    slo: Slo,
) -> PeerOutcome:
    """The sweep's trials from its combinations' runs (each combination's `summary.json`: one row a
    run, vLLM's benchmark figures and the serve parameters among them), in order. The sweep names
    no winner; the pick is the one a person reading `summary.csv` makes: the lowest median p50 TTFT
    among the combinations whose median p90 meets the SLO's TTFT target and p50 its median target
    (the lowest overall when none does)."""
    trials = []
    for runs in combinations:
        if not runs:
            continue
        params = {name: runs[0][name] for name in names if name in runs[0]}
        trials.append(
            PeerTrial(
                params=params,
                p50_ttft_ms=_median(run.get("median_ttft_ms") for run in runs),
                p90_ttft_ms=_median(run.get("p90_ttft_ms") for run in runs),
                goodput_rps=_median(run.get("request_goodput") for run in runs),
                ok=True,
            )
        )
    measured = [i for i, t in enumerate(trials) if t.p50_ttft_ms is not None]
    meeting = [i for i in measured if _meets(trials[i], slo)]
    pool = meeting or measured
    pick = min(pool, key=lambda i: trials[i].p50_ttft_ms or math.inf) if pool else None
    how = "lowest median p50 TTFT " + ("within the SLO" if meeting else "(none met the SLO)")
    return PeerOutcome(
        trials=trials, pick=pick, claims_better=_claims_better(trials, pick, defaults, names), how=how
    )


def _meets(trial: PeerTrial, slo: Slo) -> bool:
    p50, p90 = trial.p50_ttft_ms, trial.p90_ttft_ms
    if p50 is None or p90 is None:
        return False
    return p90 <= slo.ttft_ms and (not slo.ttft_p50_ms or p50 <= slo.ttft_p50_ms)


def _claims_better(
    trials: Sequence[PeerTrial],
    pick: int | None,
    defaults: Mapping[str, ParamValue],
    names: Sequence[str],
) -> bool | None:
    """Whether the peer's own p50 of its pick is below its own p50 of vLLM's defaults."""
    if pick is None:
        return None
    base = next((t for t in trials if t.ok and same_params(t.params, defaults, names)), None)
    chosen = trials[pick]
    if base is None or base.p50_ttft_ms is None or chosen.p50_ttft_ms is None:
        return None
    if same_params(chosen.params, defaults, names):
        return False
    return chosen.p50_ttft_ms < base.p50_ttft_ms


def optimizer_outcome(
    result: Mapping[str, Any],
    *,
    selected: Mapping[str, Mapping[str, Any]],
    defaults: Mapping[str, ParamValue],
    names: Sequence[str],
) -> PeerOutcome:
    """vllm-optimizer's trials and pick from its `result.json`, `trials` in order; each trial's flags
    are `defaults` with the ones it selected (`selected`, by trial id: its manifest's
    `parameters.selected_args`; the baseline selects none). Its pick is `best` (the highest score
    among the trials meeting the constraints); with none meeting them it names no configuration, and
    its user keeps vLLM's defaults: the baseline is the pick. Its claim: the pick's score beat the
    baseline's."""
    scores: dict[str, float | None] = {}
    for document in [*(result.get("ranking") or []), result.get("baseline"), result.get("best")]:
        if document:
            scores[str(document["trial_id"])] = _number(document.get("score"))
    trials = []
    ids = []
    for trial in result.get("trials") or []:
        trial_id = str(trial.get("trial_id"))
        chosen = {str(k).replace("-", "_"): v for k, v in (selected.get(trial_id) or {}).items()}
        params = {name: chosen.get(name, defaults.get(name)) for name in names}
        trials.append(
            PeerTrial(
                params={name: value for name, value in params.items() if value is not None},
                p50_ttft_ms=_ttft_median(trial.get("metrics") or {}),
                p90_ttft_ms=None,
                goodput_rps=scores.get(trial_id),
                ok=trial.get("status") == "completed",
            )
        )
        ids.append(trial_id)
    best, baseline = result.get("best"), result.get("baseline")
    if best and str(best["trial_id"]) in ids:
        pick: int | None = ids.index(str(best["trial_id"]))
        how = "its best score (request goodput) among trials meeting its constraint"
    elif baseline and str(baseline["trial_id"]) in ids:
        pick = ids.index(str(baseline["trial_id"]))
        how = "no trial met its constraint: vLLM's defaults kept"
    else:
        pick, how = None, "no result"
    claims: bool | None = False
    if best and baseline and best["trial_id"] != baseline["trial_id"]:
        claims = float(best["score"]) > float(baseline["score"])
    return PeerOutcome(trials=trials, pick=pick, claims_better=claims, how=how)


def _ttft_median(metrics: Mapping[str, Any]) -> float | None:
    for name, summary in metrics.items():
        if ("ttft" in name or "time_to_first_token" in name) and isinstance(summary, Mapping):
            return _number(summary.get("median"))
    return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _median(values: Iterable[object]) -> float | None:
    numbers = [n for n in (_number(v) for v in values) if n is not None]
    return statistics.median(numbers) if numbers else None


def _norm(value: object) -> str:
    return str(value).lower()


def same_params(params: Mapping[str, object], other: Mapping[str, object], names: Sequence[str]) -> bool:
    """The two parameter sets agree on `names` (values compared as lower-case text)."""
    return all(_norm(params.get(name)) == _norm(other.get(name)) for name in names)


def match_key(grid: PeerGrid, params: Mapping[str, object], *, names: Sequence[str]) -> str | None:
    """evertune's config key of the candidate serving `params` (compared on `names`, the flags that
    vary), or None when it is not one of evertune's candidates."""
    for key, candidate in zip(grid.keys, grid.serve_params, strict=True):
        if same_params(candidate, params, names):
            return key
    return None


def varying_names(grid: PeerGrid) -> list[str]:
    """The flags (`_` spelling) that take more than one value over the grid, in first-seen order."""
    values: dict[str, set[str]] = {}
    for params in grid.serve_params:
        for name, value in params.items():
            values.setdefault(name, set()).add(_norm(value))
    return [name for name, seen in values.items() if len(seen) > 1]


@dataclass(frozen=True)
class ServerLife:
    """One `vllm serve` process a peer started, from the shim's log and watching its pid."""

    pid: int  #: its process id
    started: float  #: wall-clock second it started
    ended: float | None = None  #: wall-clock second it was seen gone (None: still running)

    def seconds(self, now: float) -> float:
        return (self.ended if self.ended is not None else now) - self.started


def parse_server_log(text: str) -> list[tuple[int, float]]:
    """The shim's log lines ("PID START\n"), in order; a last line not yet ended is skipped."""
    found = []
    for line in text.split("\n")[:-1]:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            try:
                found.append((int(parts[0]), float(parts[1])))
            except ValueError:
                continue
    return found


def engine_seconds(lives: Iterable[ServerLife], *, now: float) -> float:
    """Engine time of `lives`: each server from its start until it was gone (or now)."""
    return sum(life.seconds(now) for life in lives)


def seconds_until(lives: Sequence[ServerLife], index: int, *, now: float) -> float | None:
    """Engine time spent up to the end of the `index`-th server (its trial), None past the end."""
    if index >= len(lives):
        return None
    return engine_seconds(lives[: index + 1], now=now)
