"""Several replicas of one engine config handled as one: start, wait until all are ready, stop.

`EngineGroup` holds the engines `registry.make_replicas` built (each on its own port and, on CPU,
its own cores): the runner measures a config of several replicas through it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from evertune.domain.engines.metrics import EngineMetrics
from evertune.domain.engines.process import ServedInBlock
from evertune.domain.engines.protocol import Engine


async def start_all(replicas: Sequence[Engine]) -> None:
    """Start each replica in turn (they then load side by side); on a failure stop all and raise."""
    try:
        for replica in replicas:
            await replica.start()
    except BaseException:
        await stop_all(replicas)
        raise


async def wait_all_ready(replicas: Sequence[Engine], timeout_s: float) -> None:
    """Return when every replica is ready; on the first failure stop them all and raise it."""
    tasks = [asyncio.ensure_future(replica.wait_ready(timeout_s)) for replica in replicas]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    failures = [err for task in done if (err := task.exception()) is not None]
    if failures:
        await stop_all(replicas)
        raise failures[0]


async def stop_all(replicas: Sequence[Engine], timeout_s: float = 20.0) -> None:
    """Stop every replica at once."""
    await asyncio.gather(*(replica.stop(timeout_s) for replica in replicas))


def split_cores(cores: Sequence[int], parts: int) -> list[list[int]]:
    """`cores` dealt into `parts` equal runs (the remainder unused); with fewer cores than parts,
    every part shares them all."""
    share = len(cores) // parts
    if share == 0:
        return [list(cores) for _ in range(parts)]
    return [list(cores[i * share : (i + 1) * share]) for i in range(parts)]


class EngineGroup(ServedInBlock):
    """Identical engines on their own ports, handled as one (load balancing is the gateway's)."""

    def __init__(self, replicas: Sequence[Engine]) -> None:
        if not replicas:
            raise ValueError("an engine group needs at least one replica")
        self.replicas: list[Engine] = list(replicas)  #: the engines, in order

    @property
    def urls(self) -> list[str]:
        """Base URLs of the replicas, in order."""
        return [replica.base_url for replica in self.replicas]

    @property
    def base_url(self) -> str:
        """The first replica's URL (golden answers and model listing go there)."""
        return self.replicas[0].base_url

    def log_tail(self, n: int = 40) -> list[str]:
        """The last lines of every replica's log, each marked with its replica (n in all, at most)."""
        each = max(1, n // len(self.replicas))
        return [
            f"[replica {i}] {line}"
            for i, replica in enumerate(self.replicas)
            for line in replica.log_tail(each)
        ]

    async def start(self) -> None:
        """Start every replica (they load side by side)."""
        await start_all(self.replicas)

    async def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Return when every replica is ready; on the first failure stop them all and raise it."""
        await wait_all_ready(self.replicas, timeout_s)

    async def health(self) -> list[bool]:
        """Health of each replica, in order."""
        return list(await asyncio.gather(*(replica.health() for replica in self.replicas)))

    async def scrape_metrics(self) -> list[EngineMetrics]:
        """One /metrics scrape per replica, in order."""
        return list(await asyncio.gather(*(replica.scrape_metrics() for replica in self.replicas)))

    async def stop(self, timeout_s: float = 20.0) -> None:
        """Stop every replica (see `ProcessEngine.stop`)."""
        await stop_all(self.replicas, timeout_s)
