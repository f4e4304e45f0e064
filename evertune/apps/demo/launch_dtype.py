"""The dtype of the demo's first configuration: the one this CPU computes faster, measured at launch.

An operator who launches a CPU endpoint picks its precision once, on the machine it runs on, and
the demo's story starts from a configuration that was right at launch. Which dtype that is flips
with the silicon: with AVX512-BF16 or AMX, bf16 matrix products are native and faster than fp32;
on an AVX2-only CPU bf16 is widened to fp32 in software (on an AMD EPYC Zen 3, 2 cores, one linear
layer of the `small` model's shape took 65.6 ms in bf16 and 8.6 ms in fp32; vLLM's `auto`, bf16,
prefilled a grown-traffic prompt in 7.3 s there). Nothing here names a vendor or an ISA: it times
the model's own largest layer shape in each dtype, on one thread (a CPU engine's core), and takes
the faster. The searcher still measures the other dtype when its budget has room; this only keeps
the demo from starting on a configuration that never met its SLO on this machine.

`faster_dtype` is pure; `time_linear_ms` does the CPU work (call it off the event loop);
`measure_launch_dtype` reads the model's shape and times each dtype in a thread.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evertune.errors import InvalidArgument

#: Tokens of the timed linear layer's input: a few hundred, the size of a voice turn's prefill.
PROBE_TOKENS = 256
#: Timed calls per dtype (their median counts), after `WARMUP_CALLS` unmeasured ones.
PROBE_CALLS = 7
WARMUP_CALLS = 2


@dataclass(frozen=True)
class DtypeChoice:
    """What the launch measurement found."""

    dtype: str  #: the faster dtype, as vLLM names it ("float32", "bfloat16")
    linear_ms: dict[str, float]  #: median time of one linear layer of the model's shape, per dtype

    @property
    def line(self) -> str:
        """One line for the terminal and the report."""
        timed = " vs ".join(f"{name} {ms:.1f} ms" for name, ms in self.linear_ms.items())
        return (
            f"dtype {self.dtype}, the faster on this CPU at launch (a linear layer of the model's "
            f"shape on one thread: {timed})"
        )


def faster_dtype(linear_ms: Mapping[str, float]) -> str:
    """The dtype with the lowest time; on a tie the one listed first."""
    if not linear_ms:
        raise InvalidArgument("no dtype was timed")
    return min(linear_ms, key=linear_ms.__getitem__)  # min keeps the first of equal times


def time_linear_ms(dtype: str, *, tokens: int, in_features: int, out_features: int) -> float:
    """Median wall time of `PROBE_CALLS` calls of a `tokens x in_features -> out_features` linear
    layer in `dtype` on one thread, ms. Blocks for up to a few seconds."""
    import torch  # here: only the vLLM demo needs it, and it takes seconds to import

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise InvalidArgument(f"unknown dtype {dtype!r}: torch has no such type")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = torch.randn(tokens, in_features, dtype=torch_dtype)
        weight = torch.randn(out_features, in_features, dtype=torch_dtype)
        with torch.inference_mode():
            for _ in range(WARMUP_CALLS):
                torch.nn.functional.linear(x, weight)
            times = []
            for _ in range(PROBE_CALLS):
                start = time.perf_counter()
                torch.nn.functional.linear(x, weight)
                times.append((time.perf_counter() - start) * 1000.0)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times)


def layer_shape(model_dir: Path) -> tuple[int, int]:
    """(in, out) features of the model's largest projection: hidden -> intermediate (the MLP's)."""
    config = json.loads((model_dir / "config.json").read_text())
    return int(config["hidden_size"]), int(config["intermediate_size"])


async def measure_launch_dtype(dtypes: Sequence[str], *, model_dir: Path) -> DtypeChoice:
    """Time each of `dtypes` on the model's layer shape (in a thread) and choose the faster."""
    in_features, out_features = layer_shape(model_dir)
    timed: dict[str, float] = {}
    for dtype in dtypes:
        timed[dtype] = await asyncio.to_thread(
            time_linear_ms, dtype, tokens=PROBE_TOKENS, in_features=in_features, out_features=out_features
        )
    return DtypeChoice(dtype=faster_dtype(timed), linear_ms=timed)
