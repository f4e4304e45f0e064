"""`bench stack`'s ground truth: the stated cells of the CPU stack, what each measured, and the
scoring of a whole-stack search on them (pure, but for the cache file).

A cell is one engine configuration with a name a person reads ("llama.cpp Q8_0, latency"). Every
cell is measured `repeats` times, interleaved (`interleave.rotated`), each repeat a real trial with
the SLO gate and the correctness gate against one fixed reference (vLLM serving the model's fp32
weights). What a cell measured is a `CellResult`: its `GridPoint` (TTFT, attainment, goodput per
repeat, as `bench search`'s grid), the gate's share and verdict per repeat, and what the engine
did per repeat (prefill ms per 1k computed prompt tokens, decode ms per token, prefix-cache hit
share), so that whatever wins, the figures say why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evertune.apps.benchmarks import Figures
from evertune.apps.benchmarks.search_grid import (
    GridPoint,
    best_point,
    compare_cells,
    finite_median,
    point_of,
    rounded,
    start_figures,
    write_cache,
)
from evertune.domain.engines import EngineSpec
from evertune.domain.slo import Slo

#: vLLM's weights format evertune makes (`quantize.make_int8_w8a8`).
INT8 = "int8-w8a8"
#: The GGUF file types of the full grid: the float llama.cpp runs natively, 8-bit, the file as
#: shipped (Q4_1) and llama.cpp's usual 4-bit k-quant.
GGUF_TYPES = ("bf16", "q8_0", "q4_1", "q4_k_m")


@dataclass(frozen=True)
class Cell:
    """One configuration of the stated grid."""

    name: str  #: how reports name it ("vLLM defaults", "llama.cpp Q8_0, latency")
    spec: EngineSpec  #: the engine configuration


def reference_spec(base: EngineSpec) -> EngineSpec:
    """The model's fixed correctness reference: vLLM serving its weights in fp32 (bf16 weights
    widen exactly), `base`'s other knobs."""
    return base.model_copy(update={"dtype": "float32"})


def llama_cpp_latency(model: str, file_type: str) -> EngineSpec:
    """llama.cpp's configuration for latency on a CPU, as its server's docs advise: a few parallel
    slots each holding a whole voice conversation (4 x 4,096 tokens), flash attention, and reuse of
    cached prompt chunks that moved (`--cache-reuse 256`)."""
    return EngineSpec(
        kind="llama.cpp",
        model=model,
        quantization=file_type,
        max_num_seqs=4,
        max_model_len=4096,
        flash_attention=True,
        cache_reuse_tokens=256,
    )


def stack_cells(base: EngineSpec, *, quick: bool) -> list[Cell]:
    """The stated grid around vLLM's defaults `base` (eager, its KV cache set), defaults first.

    Full (13 cells): vLLM's defaults; the best bf16 cell of `bench search`'s grid on the machines
    measured (32-token KV blocks: 135-162 ms against the defaults' 203-248 ms at p50); vLLM fp32
    (the reference configuration); int8 W8A8, alone and with 32-token blocks; llama.cpp serving
    each GGUF type of `GGUF_TYPES` with its defaults and with its latency configuration
    (`llama_cpp_latency`). Quick (7 cells): vLLM's defaults, bf16 with 32-token blocks, fp32,
    int8 with 32-token blocks, llama.cpp BF16 and Q8_0 tuned for latency, and the shipped Q4_1
    with llama.cpp's defaults (what a person serving the file as downloaded runs).
    """
    model = base.model
    blocks = base.model_copy(update={"block_size": 32})
    int8 = base.model_copy(update={"quantization": INT8})
    vllm = [
        Cell("vLLM defaults", base),
        Cell("vLLM bf16, 32-token blocks", blocks),
        Cell("vLLM fp32 (the reference)", reference_spec(base)),
    ]
    if quick:
        return [
            *vllm,
            Cell("vLLM int8, 32-token blocks", int8.model_copy(update={"block_size": 32})),
            Cell("llama.cpp BF16, latency", llama_cpp_latency(model, "bf16")),
            Cell("llama.cpp Q8_0, latency", llama_cpp_latency(model, "q8_0")),
            Cell("llama.cpp Q4_1, defaults", EngineSpec(kind="llama.cpp", model=model, quantization="q4_1")),
        ]
    llama_cpp = [
        cell
        for file_type in GGUF_TYPES
        for cell in (
            Cell(
                f"llama.cpp {file_type.upper()}, defaults",
                EngineSpec(kind="llama.cpp", model=model, quantization=file_type),
            ),
            Cell(f"llama.cpp {file_type.upper()}, latency", llama_cpp_latency(model, file_type)),
        )
    ]
    return [
        *vllm,
        Cell("vLLM int8", int8),
        Cell("vLLM int8, 32-token blocks", int8.model_copy(update={"block_size": 32})),
        *llama_cpp,
    ]


@dataclass(frozen=True)
class CellResult:
    """What one cell measured over its repeats, in round order."""

    name: str  #: the cell's name
    point: GridPoint  #: TTFT, attainment and goodput per repeat
    agreement: tuple[float, ...]  #: the correctness gate's share per repeat (NaN: not judged)
    gate_passed: tuple[bool, ...]  #: the correctness gate's verdict per repeat
    gate_detail: str  #: the first judged repeat's one line (per-prompt agreement, why it failed)
    prefill_ms_per_1k: tuple[float, ...]  #: engine prefill ms per 1k computed prompt tokens
    decode_ms_per_token: tuple[float, ...]  #: engine decode ms per generated token
    cache_hit_share: tuple[float, ...]  #: share of prompt tokens served from the prefix cache

    @property
    def passes_gate(self) -> bool:
        """Every repeat ran and its answers passed the correctness gate."""
        return self.point.ok and bool(self.gate_passed) and all(self.gate_passed)

    @property
    def agreement_median(self) -> float:
        """Median gate share over the judged repeats (NaN: none judged)."""
        return finite_median(self.agreement)


def eligible(cells: Mapping[str, CellResult], *, start_key: str) -> dict[str, GridPoint]:
    """The grid points that count as a search's best: cells that ran and passed the correctness
    gate, and the start (which a search never has to leave)."""
    return {key: c.point for key, c in cells.items() if c.passes_gate or key == start_key}


def pareto_front(cells: Mapping[str, CellResult]) -> list[str]:
    """Keys of the cells no other cell beats on both p50 TTFT (lower) and agreement with the
    reference (higher), fastest first; cells that failed a repeat or were never judged are out."""
    ok = {
        key: (c.point.p50, c.agreement_median)
        for key, c in cells.items()
        if c.point.ok and math.isfinite(c.agreement_median)
    }

    def dominated(key: str) -> bool:
        p50, agreement = ok[key]
        return any(
            o_p50 <= p50 and o_agreement >= agreement and (o_p50, o_agreement) != (p50, agreement)
            for o_p50, o_agreement in ok.values()
        )

    return sorted((key for key in ok if not dominated(key)), key=lambda key: ok[key][0])


def search_score(
    cells: Mapping[str, CellResult],
    *,
    start_key: str,
    winner_key: str | None,
    slo: Slo,
    min_floor: float,
) -> Figures:
    """A whole-stack search from `start_key` that chose `winner_key` (None: no winner), scored on
    the measured cells as `bench search` scores (`start_figures`, over the cells a search may win
    with: `eligible`), and against the grid's best:

    - `winner_vs_best_ratio` (chosen / best median p50) with the noise rule's interval, pairs
      taken round by round; `no_worse_than_best`: that interval includes 1.0 or lies below it;
    - `winner_passes_gate`: the chosen cell's answers passed against the reference in every repeat.
    """
    points = eligible(cells, start_key=start_key)
    best = best_point(points, slo=slo)
    chosen = cells[winner_key or start_key].point
    # A winner whose own trial passed the gate but whose grid repeats did not is scored still.
    figures = start_figures(
        {**points, chosen.key: chosen},
        start_key=start_key,
        winner_key=winner_key,
        slo=slo,
        min_floor=min_floor,
        contenders=points,
    )
    versus = compare_cells(best, chosen, min_floor=min_floor)
    return {
        **figures,
        "grid_best": cells[best.key].name,
        "winner": cells[chosen.key].name if winner_key else "",
        "winner_vs_best_ratio": rounded(chosen.p50 / best.p50),
        "winner_vs_best_interval": [rounded(versus.ratio_low), rounded(versus.ratio_high)],
        "no_worse_than_best": versus.ratio_low <= 1.0,
        "winner_passes_gate": cells[chosen.key].passes_gate or chosen.key == start_key,
    }


def cell_rows(cells: Mapping[str, CellResult], *, slo: Slo) -> list[dict[str, Any]]:
    """The cells as JSON rows, fastest first: medians, every repeat, the gate and the engine's work."""
    return [
        {
            "cell": c.name,
            "p50_ms": rounded(c.point.p50),
            "p99_ms": rounded(c.point.p99),
            "attainment": rounded(finite_median(c.point.attainment)),
            "meets_slo": c.point.meets_slo(slo),
            "agreement": rounded(c.agreement_median),
            "passes_gate": c.passes_gate,
            "gate": c.gate_detail,
            "prefill_ms_per_1k_tokens": rounded(finite_median(c.prefill_ms_per_1k)),
            "decode_ms_per_token": rounded(finite_median(c.decode_ms_per_token)),
            "cache_hit_share": rounded(finite_median(c.cache_hit_share)),
            "p50_ms_repeats": [rounded(x) for x in c.point.p50_ms],
            "errors": list(c.point.errors),
        }
        for c in sorted(cells.values(), key=lambda c: (not c.point.ok, c.point.p50))
    ]


def read_cells(cache: Path, *, keys: set[str]) -> tuple[dict[str, CellResult], float] | None:
    """A cached grid of exactly `keys` and the seconds it took to measure, or None."""
    if not cache.is_file():
        return None
    stored = json.loads(cache.read_text())
    cells = {}
    for raw in stored["cells"]:
        point = point_of(raw["point"])
        cells[point.key] = CellResult(
            name=str(raw["name"]),
            point=point,
            agreement=_floats(raw["agreement"]),
            gate_passed=tuple(bool(x) for x in raw["gate_passed"]),
            gate_detail=str(raw["gate_detail"]),
            prefill_ms_per_1k=_floats(raw["prefill_ms_per_1k"]),
            decode_ms_per_token=_floats(raw["decode_ms_per_token"]),
            cache_hit_share=_floats(raw["cache_hit_share"]),
        )
    return (cells, float(stored["measured_s"])) if set(cells) == keys else None


def write_cells(cache: Path, cells: Mapping[str, CellResult], *, measured_s: float) -> None:
    """Store a measured grid (atomically)."""
    write_cache(cache, field="cells", records=cells.values(), measured_s=measured_s)


def _floats(values: Sequence[Any]) -> tuple[float, ...]:
    return tuple(float(x) for x in values)
