"""Per-shape kernel configurations: the search, and the cache that keeps its results per hardware.

Pure except `load_cache` / `save_cache` (one JSON file) and `active_cache` (loads it once per process).

- A `ShapeKey` names one op at one shape: the op, its fixed dimensions (hidden size, heads, ...), the
  dtype and the tokens of a step, bucketed to the next power of two (a step of 300 tokens uses the
  config tuned for 512).
- `search` times every candidate `KernelConfig` with the `measure` it is given and keeps the fastest;
  a candidate that fails (too many registers, shared memory) is recorded with its reason.
- `tune` fills a `ConfigCache` for a list of shapes. Under Triton's interpreter there is nothing to
  time (it runs each program in numpy on the CPU and ignores warps and stages), so it records the
  op's default config with source "interpreter" and says so.
- The cache lives at `<data dir>/kernels/<hardware>.json` (`cache_path`), the hardware key naming the
  device and its compute capability (`nvidia-h200-sm90`), or `cpu-interpreter`. It is discarded when
  Triton's version changed since it was written (a config tuned on one compiler is not evidence for
  another).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evertune.infra.logging import get_logger

log = get_logger(__name__)

#: Version of the cache file's layout.
CACHE_LAYOUT = 1

#: Hardware key of Triton's interpreter on the CPU.
INTERPRETER_HARDWARE = "cpu-interpreter"


@dataclass(frozen=True)
class KernelConfig:
    """One launch configuration of a kernel."""

    #: the op's one tunable block size: rms_norm columns per chunk, silu_and_mul columns per
    #: program, rotary_embedding heads per program
    block: int
    num_warps: int = 4  #: warps per program (ignored by the interpreter)
    num_stages: int = 1  #: software-pipelining stages (ignored by the interpreter)

    def __post_init__(self) -> None:
        if self.block < 1 or self.block & (self.block - 1):
            raise ValueError(f"kernel config block must be a power of two, got {self.block}")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"kernel config num_warps must be a power of two up to 32, got {self.num_warps}")
        if self.num_stages < 1:
            raise ValueError(f"kernel config num_stages must be >= 1, got {self.num_stages}")


@dataclass(frozen=True)
class ShapeKey:
    """One op at one shape."""

    op: str  #: "rms_norm", "silu_and_mul" or "rotary_embedding"
    tokens: int  #: tokens in the step (rows of the op's input)
    dims: tuple[int, ...]  #: the op's fixed dimensions (see each op's `dims_of`)
    dtype: str  #: "bfloat16", "float16" or "float32"

    @property
    def bucket(self) -> int:
        """The tokens rounded up to a power of two: configs are tuned and looked up per bucket."""
        return tokens_bucket(self.tokens)

    @property
    def key(self) -> str:
        """The cache key: op, dtype, dims and token bucket."""
        return f"{self.op}/{self.dtype}/{'x'.join(map(str, self.dims))}/t{self.bucket}"


def tokens_bucket(tokens: int) -> int:
    """Next power of two >= tokens (1 for 0 or 1)."""
    return 1 if tokens <= 1 else 1 << (tokens - 1).bit_length()


@dataclass(frozen=True)
class CacheEntry:
    """What the cache keeps for one shape."""

    config: KernelConfig  #: the config to launch with
    source: str  #: "search" (timed on this hardware), "interpreter" (not timed) or "default"
    median_us: float | None  #: its median time in microseconds; None when nothing was timed
    candidates: int  #: configs tried (1 for the interpreter)
    note: str = ""  #: one line on how it was chosen


@dataclass
class ConfigCache:
    """The kernel configs of one hardware key, by `ShapeKey.key`."""

    hardware: str  #: hardware key (see `hardware_key`)
    triton_version: str  #: Triton that the configs were chosen with
    entries: dict[str, CacheEntry] = field(default_factory=dict)  #: ShapeKey.key -> entry

    def put(self, shape: ShapeKey, entry: CacheEntry) -> None:
        self.entries[shape.key] = entry

    def get(self, shape: ShapeKey) -> KernelConfig | None:
        """The config of `shape`'s bucket; else that of the nearest bucket (in log2 tokens, the larger
        one on a tie) of the same op, dtype and dims; else None."""
        exact = self.entries.get(shape.key)
        if exact is not None:
            return exact.config
        prefix = shape.key.rsplit("/t", 1)[0] + "/t"
        best: tuple[float, int] | None = None
        chosen: KernelConfig | None = None
        for key, entry in self.entries.items():
            tail = key[len(prefix) :]
            if not key.startswith(prefix) or not tail.isdigit():
                continue
            bucket = int(tail)
            rank = (abs(math.log2(bucket) - math.log2(shape.bucket)), -bucket)
            if best is None or rank < best:
                best, chosen = rank, entry.config
        return chosen

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": CACHE_LAYOUT,
            "hardware": self.hardware,
            "triton_version": self.triton_version,
            "entries": {key: asdict(entry) for key, entry in sorted(self.entries.items())},
        }

    @staticmethod
    def from_json(raw: Any) -> ConfigCache:
        """Parse a cache file's JSON; `ValueError` with one line when it is not one."""
        if not isinstance(raw, dict) or raw.get("layout") != CACHE_LAYOUT:
            raise ValueError(f"not a kernel config cache of layout {CACHE_LAYOUT}")
        try:
            entries = {
                str(key): CacheEntry(
                    config=KernelConfig(**value["config"]),
                    source=str(value["source"]),
                    median_us=None if value["median_us"] is None else float(value["median_us"]),
                    candidates=int(value["candidates"]),
                    note=str(value.get("note", "")),
                )
                for key, value in raw["entries"].items()
            }
            return ConfigCache(
                hardware=str(raw["hardware"]), triton_version=str(raw["triton_version"]), entries=entries
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"malformed kernel config cache entry ({err})") from None


def hardware_key(*, device_name: str | None, capability: tuple[int, int] | None) -> str:
    """`nvidia-h200-sm90` from torch's device name and compute capability; `cpu-interpreter` without a
    device."""
    if device_name is None:
        return INTERPRETER_HARDWARE
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "gpu"
    return f"{slug}-sm{capability[0]}{capability[1]}" if capability else slug


def cache_path(data_dir: Path, hardware: str) -> Path:
    """Where the kernel configs of `hardware` are kept: `<data dir>/kernels/<hardware>.json`."""
    return data_dir / "kernels" / f"{hardware}.json"


def load_cache(path: Path, *, hardware: str, triton_version: str) -> ConfigCache:
    """The cache at `path`; an empty one when the file is missing, unreadable, of another hardware or
    written by another Triton (each logged: a bad cache costs speed, never a failed launch)."""
    empty = ConfigCache(hardware=hardware, triton_version=triton_version)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return empty
    except (OSError, ValueError) as err:
        log.warning("kernel config cache unreadable, ignored", path=str(path), error=str(err))
        return empty
    try:
        cache = ConfigCache.from_json(raw)
    except ValueError as err:
        log.warning("kernel config cache malformed, ignored", path=str(path), error=str(err))
        return empty
    if cache.hardware != hardware or cache.triton_version != triton_version:
        log.warning(
            "kernel config cache is for another hardware or Triton, ignored",
            path=str(path),
            cache_hardware=cache.hardware,
            cache_triton=cache.triton_version,
            hardware=hardware,
            triton=triton_version,
        )
        return empty
    return cache


def save_cache(path: Path, cache: ConfigCache) -> None:
    """Write `cache` to `path` (atomically: a reader sees the old file or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cache.to_json(), indent=1, sort_keys=True))
    tmp.replace(path)


@dataclass(frozen=True)
class Timing:
    """One candidate's outcome in a search."""

    config: KernelConfig  #: the candidate
    median_us: float | None  #: its median time; None when it failed
    error: str = ""  #: why it failed (one line); "" when it ran


@dataclass(frozen=True)
class SearchResult:
    """The outcome of searching one shape."""

    best: KernelConfig  #: the fastest candidate
    best_us: float  #: its median time, microseconds
    timings: tuple[Timing, ...]  #: every candidate, in the order tried


def search(candidates: Sequence[KernelConfig], measure: Callable[[KernelConfig], float]) -> SearchResult:
    """Time each candidate with `measure` (median microseconds) and keep the fastest; the first listed
    wins a tie. A candidate whose `measure` raises is recorded as failed. `ValueError` when there are
    no candidates or every one failed."""
    if not candidates:
        raise ValueError("no candidate configs to search")
    timings: list[Timing] = []
    for config in candidates:
        try:
            us = float(measure(config))
        except Exception as err:  # a config the compiler or the device refuses
            timings.append(Timing(config, None, " ".join(f"{type(err).__name__}: {err}".split())[:200]))
            continue
        if not math.isfinite(us) or us < 0:
            timings.append(Timing(config, None, f"measured {us!r}"))
            continue
        timings.append(Timing(config, us))
    ran = [t for t in timings if t.median_us is not None]
    if not ran:
        raise ValueError(f"every candidate failed; first: {timings[0].error}")
    best = min(ran, key=lambda t: t.median_us if t.median_us is not None else math.inf)
    assert best.median_us is not None
    return SearchResult(best=best.config, best_us=best.median_us, timings=tuple(timings))


def tune(
    shapes: Sequence[ShapeKey],
    cache: ConfigCache,
    *,
    candidates_for: Callable[[ShapeKey], list[KernelConfig]],
    default_for: Callable[[ShapeKey], KernelConfig],
    measure: Callable[[ShapeKey, KernelConfig], float] | None,
) -> dict[str, SearchResult | None]:
    """Fill `cache` for every shape (one entry per bucket). With `measure` (a GPU), search the op's
    candidates; without (the interpreter), record the op's default config untimed. Returns each
    shape's search result by key (None where nothing was timed)."""
    results: dict[str, SearchResult | None] = {}
    for shape in shapes:
        if shape.key in results:
            continue
        if measure is None:
            cache.put(
                shape,
                CacheEntry(
                    config=default_for(shape),
                    source="interpreter",
                    median_us=None,
                    candidates=1,
                    note="Triton interpreter on the CPU: one config runs, warps and stages are ignored; "
                    "nothing was timed",
                ),
            )
            results[shape.key] = None
            continue
        candidates = candidates_for(shape)
        result = search(candidates, lambda config, shape=shape: measure(shape, config))  # type: ignore[misc]
        failed = sum(1 for t in result.timings if t.median_us is None)
        cache.put(
            shape,
            CacheEntry(
                config=result.best,
                source="search",
                median_us=result.best_us,
                candidates=len(candidates),
                note=f"fastest of {len(candidates) - failed} timed candidates ({failed} failed)",
            ),
        )
        results[shape.key] = result
    return results


# --- the process's cache ------------------------------------------------------------------------

_ACTIVE: ConfigCache | None = None


def active_cache() -> ConfigCache:
    """The cache of this machine's hardware from the data dir, loaded on first use."""
    global _ACTIVE
    if _ACTIVE is None:
        _ACTIVE = load_cache(
            cache_path(default_data_dir(), local_hardware_key()),
            hardware=local_hardware_key(),
            triton_version=triton_version(),
        )
    return _ACTIVE


def set_active_cache(cache: ConfigCache | None) -> None:
    """Replace the process's cache (None: load it again on next use)."""
    global _ACTIVE
    _ACTIVE = cache


def local_hardware_key() -> str:
    """The hardware key of this machine: its first GPU, or the interpreter."""
    from evertune.kernels._runtime import backend

    if backend() != "gpu":
        return INTERPRETER_HARDWARE
    import torch

    return hardware_key(
        device_name=torch.cuda.get_device_name(0), capability=torch.cuda.get_device_capability(0)
    )


def triton_version() -> str:
    """The installed Triton's version ("none" without Triton)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton")
    except PackageNotFoundError:
        return "none"


def default_data_dir() -> Path:
    """`$EVERTUNE_DATA_DIR`, else `~/.evertune` (as every evertune part)."""
    from evertune.domain.perfmodel.calibration import default_data_dir as data_dir

    return data_dir()
