"""`bench search`'s ground truth: the measured grid of a space, and a search scored on it (pure).

Every configuration of the grid is measured `repeats` times, interleaved in time (round r measures
every cell, in an order rotated by r), so the machine's drift falls on every cell alike. A cell's
figures are the medians of its repeats; two cells are compared with the searcher's own noise rule
(`evertune.searcher.noise.compare`, pairs taken round by round), against the A/A floor of the
start's own repeats. Cells are keyed canonically (`grid_key`): vLLM-CPU's `dtype auto` is bf16, so
a space built around an fp32 start names the same configurations as one built around vLLM's
defaults.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evertune.apps.benchmarks import Figures
from evertune.domain.engines import EngineSpec
from evertune.domain.slo import Slo
from evertune.searcher.noise import Comparison, Verdict, compare, noise_floor
from evertune.searcher.space import CPU_AUTO_DTYPE, config_key


def grid_key(spec: EngineSpec) -> str:
    """The cell of a configuration, whatever base its space was built around (dtype unset = bf16)."""
    return config_key(spec.model_copy(update={"dtype": spec.dtype or CPU_AUTO_DTYPE}))


@dataclass(frozen=True)
class GridPoint:
    """One configuration's repeated measurements at the gate rate, in round order."""

    key: str  #: `grid_key` of the configuration
    knobs: str  #: its changes from vLLM's defaults ("" = the defaults)
    p50_ms: tuple[float, ...]  #: p50 TTFT per repeat (NaN: the trial failed)
    p99_ms: tuple[float, ...]  #: p99 TTFT per repeat
    attainment: tuple[float, ...]  #: SLO attainment per repeat
    goodput_rps: tuple[float, ...]  #: goodput on the ladder per repeat (0: failed)
    errors: tuple[str, ...] = ()  #: one line per failed repeat

    @property
    def ok(self) -> bool:
        """Every repeat ran."""
        return not self.errors and all(math.isfinite(x) for x in self.p50_ms)

    @property
    def p50(self) -> float:
        """Median p50 TTFT over the repeats, ms."""
        return finite_median(self.p50_ms)

    @property
    def p99(self) -> float:
        """Median p99 TTFT over the repeats, ms."""
        return finite_median(self.p99_ms)

    @property
    def goodput(self) -> float:
        """Median goodput over the repeats, requests/s."""
        return finite_median(self.goodput_rps)

    def meets_slo(self, slo: Slo) -> bool:
        """The median attainment reaches the SLO's share, and the median p50 its median target."""
        return finite_median(self.attainment) >= slo.share and slo.median_met(self.p50)


def compare_cells(start: GridPoint, other: GridPoint, *, min_floor: float) -> Comparison:
    """`other` against `start` by p50 TTFT, pairs round by round, floor from `start`'s repeats."""
    pairs = [(a, b) for a, b in zip(start.p50_ms, other.p50_ms, strict=True) if math.isfinite(a)]
    base = [a for a, _ in pairs]
    cand = [b if math.isfinite(b) else math.inf for _, b in pairs]
    return compare(base, cand, lower_is_better=True, min_floor=min_floor)


def start_figures(
    grid: Mapping[str, GridPoint],
    *,
    start_key: str,
    winner_key: str | None,
    slo: Slo,
    min_floor: float,
    contenders: Mapping[str, GridPoint] | None = None,
) -> Figures:
    """A search from `start_key` that chose `winner_key` (None: no winner), scored on the grid.

    - `p50_ttft_reduction` = 1 - winner / start median p50 (0 without a winner), with the interval
      of the noise rule's comparison of the two cells;
    - `p99_ttft_ratio`, `goodput_ratio`: winner / start medians;
    - `gap_to_best` = 1 - best / winner median p50, the best among cells meeting the SLO;
    - `false_winner`: a winner that the grid does not find better than the start beyond the noise;
    - `missed_winner`: no winner although the grid holds a cell better than the start beyond the
      noise and meeting the SLO.

    `contenders`: the cells that count as the best and as missed (default: every cell; `bench
    stack` leaves out those whose answers failed the gate).
    """
    start = grid[start_key]
    chosen = grid[winner_key or start_key]
    pool = grid if contenders is None else contenders
    best = best_point(pool, slo=slo)
    versus = compare_cells(start, chosen, min_floor=min_floor)
    beyond = [
        p
        for p in pool.values()
        if p.ok
        and p.meets_slo(slo)
        and p.key != start_key
        and compare_cells(start, p, min_floor=min_floor).verdict is Verdict.BETTER
    ]
    return {
        "outcome_winner": winner_key is not None,
        "winner_knobs": chosen.knobs or "vLLM defaults" if winner_key else "",
        "p50_ttft_reduction": rounded(1 - chosen.p50 / start.p50) if winner_key else 0.0,
        "p50_ttft_reduction_interval": (
            [rounded(1 - versus.ratio_high), rounded(1 - versus.ratio_low)] if winner_key else [0.0, 0.0]
        ),
        "p50_ttft_reduction_confidence": rounded(versus.confidence) if winner_key else None,
        "p99_ttft_ratio": rounded(chosen.p99 / start.p99) if winner_key else 1.0,
        "goodput_ratio": rounded(chosen.goodput / start.goodput) if winner_key and start.goodput else 1.0,
        "gap_to_best": rounded(1 - best.p50 / chosen.p50),
        "winner_meets_slo": chosen.meets_slo(slo),
        "start_meets_slo": start.meets_slo(slo),
        "start_p50_ms": rounded(start.p50),
        "winner_p50_ms": rounded(chosen.p50),
        "grid_best_p50_ms": rounded(best.p50),
        "grid_best_knobs": best.knobs or "vLLM defaults",
        "false_winner": winner_key is not None and versus.verdict is not Verdict.BETTER,
        "missed_winner": winner_key is None and bool(beyond),
    }


def best_point(grid: Mapping[str, GridPoint], *, slo: Slo) -> GridPoint:
    """The fastest cell by median p50 among those meeting the SLO (among those that ran, when none does)."""
    feasible = [p for p in grid.values() if p.ok and p.meets_slo(slo)]
    return min(feasible or [p for p in grid.values() if p.ok], key=lambda p: p.p50)


def grid_summary(grid: Mapping[str, GridPoint], *, defaults_key: str, min_floor: float) -> Figures:
    """How noisy the machine is and how much the knobs matter, from the grid itself.

    `noise_floor_p50`: the A/A floor of the defaults' repeats (the noise rule's); `aa_spread_median`:
    the median over cells of (max / min - 1) of a cell's own repeats; `grid_spread`: slowest / fastest
    cell by median p50.
    """
    ok = [p for p in grid.values() if p.ok]
    spreads = [max(p.p50_ms) / min(p.p50_ms) - 1 for p in ok if min(p.p50_ms) > 0]
    fastest, slowest = min(ok, key=lambda p: p.p50), max(ok, key=lambda p: p.p50)
    return {
        "noise_floor_p50": rounded(noise_floor(grid[defaults_key].p50_ms, min_floor=min_floor)),
        "aa_spread_median": rounded(statistics.median(spreads)) if spreads else None,
        "grid_spread": rounded(slowest.p50 / fastest.p50),
        "grid_fastest": fastest.knobs or "vLLM defaults",
        "grid_slowest": slowest.knobs or "vLLM defaults",
    }


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN when either side is constant."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("needs two equal sequences of at least 2 values")
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx and vy else math.nan


def spearman_within(classes: Mapping[Any, Sequence[tuple[float, float]]]) -> float:
    """Spearman's rank correlation of (predicted, measured) pairs within each class, averaged with
    each class weighted by its size; classes of fewer than two pairs, or constant on either side,
    do not count. NaN when no class counts.

    For a model that prices no difference between classes (the performance model and the dtype or
    execution mode): it is judged on the orders it claims, within a class."""
    weighted: list[tuple[float, int]] = []
    for pairs in classes.values():
        if len(pairs) < 2:
            continue
        rho = spearman([p for p, _ in pairs], [m for _, m in pairs])
        if not math.isnan(rho):
            weighted.append((rho, len(pairs)))
    total = sum(n for _, n in weighted)
    return sum(rho * n for rho, n in weighted) / total if total else math.nan


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def read_grid(cache: Path, *, keys: set[str]) -> tuple[dict[str, GridPoint], float] | None:
    """A cached grid of exactly `keys` and the seconds it took to measure, or None."""
    if not cache.is_file():
        return None
    stored = json.loads(cache.read_text())
    points = {str(p["key"]): point_of(p) for p in stored["points"]}
    return (points, float(stored["measured_s"])) if set(points) == keys else None


def point_of(stored: Mapping[str, Any]) -> GridPoint:
    """A `GridPoint` read back from its JSON form (`dataclasses.asdict`)."""

    def floats(name: str) -> tuple[float, ...]:
        return tuple(float(x) for x in stored[name])

    return GridPoint(
        key=str(stored["key"]),
        knobs=str(stored["knobs"]),
        p50_ms=floats("p50_ms"),
        p99_ms=floats("p99_ms"),
        attainment=floats("attainment"),
        goodput_rps=floats("goodput_rps"),
        errors=tuple(str(x) for x in stored["errors"]),
    )


def write_grid(cache: Path, points: Mapping[str, GridPoint], *, measured_s: float) -> None:
    """Store a grid (atomically)."""
    write_cache(cache, field="points", records=points.values(), measured_s=measured_s)


def write_cache(cache: Path, *, field: str, records: Iterable[Any], measured_s: float) -> None:
    """Store a benchmark's measured records (dataclasses) under `field`, with when and how long
    they took, atomically (NaN as JSON's NaN, which `json` reads back)."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "measured_at": datetime.now(UTC).isoformat(),
        "measured_s": round(measured_s, 1),
        field: [dataclasses.asdict(r) for r in records],
    }
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=1))
    tmp.replace(cache)


def grid_rows(grid: Mapping[str, GridPoint], *, slo: Slo) -> list[dict[str, Any]]:
    """The grid as JSON rows (medians and every repeat)."""
    return [
        {
            "knobs": p.knobs or "vLLM defaults",
            "p50_ms": rounded(p.p50),
            "p99_ms": rounded(p.p99),
            "goodput_rps": rounded(p.goodput),
            "meets_slo": p.meets_slo(slo),
            "p50_ms_repeats": [rounded(x) for x in p.p50_ms],
            "attainment_repeats": [rounded(x) for x in p.attainment],
            "errors": list(p.errors),
        }
        for p in sorted(grid.values(), key=lambda p: p.p50)
    ]


def finite_median(values: Sequence[float]) -> float:
    """Median of the finite values; NaN when none is."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def rounded(x: float | None) -> float | None:
    """`x` to 4 decimals for the JSON figures; None for a missing or non-finite figure."""
    return None if x is None or not math.isfinite(x) else round(x, 4)
