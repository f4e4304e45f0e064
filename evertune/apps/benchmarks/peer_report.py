"""How `bench peers` scores its arms: each arm's pick as the judge measured it, against vLLM's
defaults (the noise rule's comparison), against the best pick of any arm, and the engine minutes
the arm spent to first measure it; the issue's goal over them; the chart. Pure, but for the chart's
file.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evertune.apps.benchmarks import Figures
from evertune.apps.benchmarks.search_grid import GridPoint, compare_cells, rounded
from evertune.searcher.noise import DEFAULT_MIN_FLOOR, Verdict
from evertune.searcher.space import Candidate
from evertune.searcher.summary import knob_changes

#: "Within 5% of the best pick": the issue's measure of how fast an arm gets there.
NEAR_BEST = 1.05


@dataclass
class Arm:
    """One tuner's run: what it picked and what that cost."""

    name: str  #: "evertune-defaults", "vllm-optimizer", ...
    pick_key: str | None  #: evertune's config key of its pick (None: no pick, or one outside the grid)
    engine_s: float  #: engine seconds it spent, starts included
    engine_starts: int  #: engines it started
    to_pick_s: float | None  #: engine seconds until it first measured its pick
    wall_s: float  #: its wall time
    claims_better: bool | None  #: its own figures called its pick better than vLLM's defaults
    details: Figures = dataclasses.field(default_factory=dict)  #: arm-specific figures for the report


def report(
    arms: Sequence[Arm],
    judged: Mapping[str, GridPoint],
    aa: GridPoint,
    *,
    by_key: Mapping[str, Candidate],
    defaults: Candidate,
) -> Figures:
    """Per-arm figures and the goal, from the judge's points by config key and its A/A twin."""
    base = judged[defaults.key]
    picked = [judged[a.pick_key] for a in arms if a.pick_key is not None and a.pick_key in judged]
    best = min((p.p50 for p in picked if p.ok), default=math.nan)
    aa_cmp = compare_cells(base, aa, min_floor=DEFAULT_MIN_FLOOR)
    rows: dict[str, Figures] = {}
    for arm in arms:
        point = judged.get(arm.pick_key or "")
        versus = compare_cells(base, point, min_floor=DEFAULT_MIN_FLOOR) if point and point.ok else None
        judge_better = (
            versus is not None and versus.verdict is Verdict.BETTER and arm.pick_key != defaults.key
        )
        near = point is not None and point.ok and point.p50 <= NEAR_BEST * best
        rows[arm.name] = {
            "chosen_config": _described(arm.pick_key, by_key=by_key, defaults=defaults),
            "p50_ttft_ms": rounded(point.p50) if point else None,
            "p50_ttft_ms_range": [rounded(min(point.p50_ms)), rounded(max(point.p50_ms))] if point else None,
            "p99_ttft_ms": rounded(point.p99) if point else None,
            "p99_ttft_ms_range": [rounded(min(point.p99_ms)), rounded(max(point.p99_ms))] if point else None,
            "attainment": rounded(statistics.median(point.attainment)) if point else None,
            "vs_best_p50_ratio": rounded(point.p50 / best) if point and point.ok else None,
            "vs_defaults_interval": [rounded(versus.ratio_low), rounded(versus.ratio_high)]
            if versus
            else None,
            "engine_starts": arm.engine_starts,
            "engine_min": round(arm.engine_s / 60, 2),
            "engine_min_to_pick": round(arm.to_pick_s / 60, 2) if arm.to_pick_s is not None else None,
            "engine_min_to_near_best": round(arm.to_pick_s / 60, 2)
            if near and arm.to_pick_s is not None
            else None,
            "wall_s": round(arm.wall_s, 1),
            "gate": _gate(point),
            "own_claims_better": arm.claims_better,
            "judge_better": judge_better,
            "false_winner": bool(arm.claims_better) and not judge_better,
            **arm.details,
        }
    return {
        "arms": rows,
        "defaults_p50_ms": rounded(base.p50),
        "best_pick_p50_ms": rounded(best),
        "aa_ratio": rounded(aa_cmp.ratio),
        "aa_interval": [rounded(aa_cmp.ratio_low), rounded(aa_cmp.ratio_high)],
        "noise_floor_p50": rounded(aa_cmp.noise_floor),
        "goal": goal(rows, judged, arms),
    }


def _described(key: str | None, *, by_key: Mapping[str, Candidate], defaults: Candidate) -> str | None:
    """A pick as its changes from vLLM's defaults (None: no pick, or one outside evertune's space)."""
    if key is None or key not in by_key:
        return None
    return "; ".join(knob_changes(defaults.spec, by_key[key].spec)) or "vLLM defaults"


def _gate(point: GridPoint | None) -> str:
    if point is None:
        return "not judged"
    failed = [e for e in point.errors if e.startswith("correctness")]
    return f"fail ({failed[0]})" if failed else "pass" if point.ok else "error"


def goal(rows: Mapping[str, Figures], judged: Mapping[str, GridPoint], arms: Sequence[Arm]) -> Figures:
    """evertune's picks no worse than any peer's beyond the noise, within 5% of the best with at most
    half a peer's engine minutes (a peer that never got there counts its whole spend), no false winner."""
    ours = [a for a in arms if a.name.startswith("evertune")]
    peers = [a for a in arms if not a.name.startswith("evertune")]
    worse = []
    for arm in ours:
        mine = judged.get(arm.pick_key or "")
        for peer in peers:
            theirs = judged.get(peer.pick_key or "")
            if mine and theirs and mine.ok and theirs.ok:
                if compare_cells(mine, theirs, min_floor=DEFAULT_MIN_FLOOR).verdict is Verdict.BETTER:
                    worse.append(f"{arm.name} < {peer.name}")
    half = []
    for arm in ours:
        mine_min = rows[arm.name]["engine_min_to_near_best"]
        for peer in peers:
            theirs_min = rows[peer.name]["engine_min_to_near_best"] or rows[peer.name]["engine_min"]
            half.append(mine_min is not None and mine_min <= 0.5 * theirs_min)
    false = [a.name for a in ours if rows[a.name]["false_winner"]]
    return {
        "no_worse_than_peers": not worse,
        "worse_than": worse,
        "half_engine_minutes": all(half) if half else False,
        "no_false_winner": not false,
        "met": not worse and bool(half) and all(half) and not false,
    }


def chart(arms: Sequence[Arm], judged: Mapping[str, GridPoint], *, path: Path) -> None:
    """Each arm's pick: judged p50 TTFT (range of repeats) against the engine minutes it spent (filled)
    and spent until it first measured its pick (open)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, arm in enumerate(arms):
        point = judged.get(arm.pick_key or "")
        if point is None or not point.ok:
            continue
        colour = f"C{i}"
        low, high = min(point.p50_ms), max(point.p50_ms)
        spent = arm.engine_s / 60
        ax.errorbar(
            [spent],
            [point.p50],
            yerr=[[point.p50 - low], [high - point.p50]],
            fmt="o",
            color=colour,
            label=arm.name,
        )
        if arm.to_pick_s is not None:
            ax.scatter([arm.to_pick_s / 60], [point.p50], facecolors="none", edgecolors=colour)
            ax.plot(
                [arm.to_pick_s / 60, spent],
                [point.p50, point.p50],
                color=colour,
                linewidth=0.6,
                linestyle=":",
            )
    ax.set_xlabel("engine minutes (open: until the pick was first measured; filled: all spent)")
    ax.set_ylabel("p50 TTFT of the pick, judged, ms (range of 3 repeats)")
    ax.set_title("bench peers: each tuner's pick against the engine time it spent")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
