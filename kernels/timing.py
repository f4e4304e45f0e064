"""GPU timing for tuning and `evertune bench kernels`: median device time per call, and the device's
copy bandwidth. Needs a CUDA device; nothing here runs on the CPU.

A call is timed inside a CUDA graph of `len(calls)` calls, each on its own input set (rotated so the
L2 cache does not hold the next call's inputs, as far as the set count allows), replayed `repeats`
times between two CUDA events; the figure is the median replay time divided by the calls. The
graph takes the host's launch cost out of the figure, as vLLM's CUDA graphs do when it serves
decode steps. Where capture fails the calls are timed eagerly between events instead.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import torch

#: The rotated inputs of one timing should cover this many times the device's L2 cache.
L2_COVER = 4
#: Most input sets of one timing.
MAX_ROTATIONS = 512


def rotations_for(bytes_per_call: int, *, l2_bytes: int, most: int = MAX_ROTATIONS) -> int:
    """Input sets so that `L2_COVER` x L2 passes through between two uses of one set (2..most)."""
    return max(2, min(most, math.ceil(L2_COVER * l2_bytes / max(1, bytes_per_call))))


def l2_bytes() -> int:
    """The L2 cache of device 0, bytes (50 MiB when torch does not say)."""
    props = torch.cuda.get_device_properties(0)
    return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)


def median_us(calls: Sequence[Callable[[], object]], *, warmup: int = 3, repeats: int = 20) -> float:
    """Median device microseconds of one call (see the module's doc)."""
    for _ in range(warmup):
        for call in calls:
            call()
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for call in calls:  # warm up on the capture stream, as capture requires
                call()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for call in calls:
                call()
        run: Callable[[], object] = graph.replay
    except RuntimeError:
        torch.cuda.synchronize()

        def run() -> None:
            for call in calls:
                call()

    run()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / len(calls))
    return statistics.median(times)


def copy_bandwidth(*, gib: float = 1.0, repeats: int = 10) -> float:
    """The device's measured peak: bytes/s of a device-to-device copy of `gib` GiB (read + write
    counted), median of `repeats`."""
    n = int(gib * 2**30) // 2
    src = torch.empty(n, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    us = median_us([lambda: dst.copy_(src)], warmup=2, repeats=repeats)
    return 2 * src.numel() * src.element_size() / (us * 1e-6)
