"""The `local` serving backend: a deployment's engines are processes on this machine.

Engines come from the engines' registry (`evertune.domain.engines.make_engine`: any kind), one per replica,
each on its own loopback port, serving the endpoint's name as its model (the gateway sends the
endpoint name upstream). A supervisor checks each replica's process every `health_interval_s`;
one that exited is restarted on the same port (so the route table stays right) at most
`max_restarts` times within `restart_window_s`, each exit, restart and give-up reported to the
deployer (which records it and emits an event). Each vLLM-CPU replica keeps to its own share of
the cores, the least used ones (`cores.py`: two engines left to vLLM's own binding share the same
cores, and a rollout always runs two).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evertune.deployer.backend import EngineReport, ReportSink, Target
from evertune.deployer.cores import cores_per_engine, place
from evertune.deployer.plan import RestartBudget
from evertune.domain.engines import (
    Engine,
    EngineFactory,
    EngineSpec,
    HardwareProfile,
    MetricsUnavailable,
    get_profile,
    make_engine,
)
from evertune.errors import EvertuneError, FailedPrecondition, InvalidArgument
from evertune.infra.logging import get_logger
from evertune.infra.nats_server import free_port
from evertune.infra.runtime.tasks import cancel_and_wait
from evertune.v1 import endpoint_pb2

log = get_logger("evertune.deployer.local")


def hardware_for(hardware_class: str) -> HardwareProfile | None:
    """The profile engines validate against: this machine for "cpu", else the named profile."""
    return None if hardware_class == "cpu" else get_profile(hardware_class)


@dataclass
class _Replica:
    index: int  #: replica index
    port: int  #: kept across restarts
    cores: list[int]  #: CPU cores a vLLM-CPU replica is bound to (empty: not placed); kept across restarts
    engine: Engine  #: the current engine process
    budget: RestartBudget  #: restart policy state
    supervisor: asyncio.Task[None] | None = None  #: the liveness loop, once ready


@dataclass
class _Running:
    target: Target  #: what runs
    replicas: list[_Replica] = field(default_factory=list)  #: one per replica


class LocalBackend:
    """Engines as local processes. See the module docstring."""

    name = "local"
    reachable = True

    def __init__(
        self,
        *,
        log_dir: Path,
        hardware_classes: list[str],
        report: ReportSink,
        health_interval_s: float,
        max_restarts: int,
        restart_window_s: float,
        ready_timeout_s: float,
        cpu_cores_per_engine: int,
        engine_factory: EngineFactory = make_engine,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log_dir = log_dir
        self.hardware_classes = list(hardware_classes)
        self._report = report
        self.health_interval_s = health_interval_s
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.ready_timeout_s = ready_timeout_s
        self._factory = engine_factory
        self._now = now
        self._allowed_cores = sorted(os.sched_getaffinity(0))
        self._per_engine = cores_per_engine(len(self._allowed_cores), cpu_cores_per_engine)
        self._running: dict[str, _Running] = {}

    # -- the protocol -----------------------------------------------------------------------

    def check(self, target: Target) -> None:
        hardware_class = target.hardware_class
        served = hardware_class in self.hardware_classes or (
            target.engine.kind == "sim" and hardware_class.startswith("sim-")
        )
        if not served:
            served_classes = ", ".join(self.hardware_classes)
            raise FailedPrecondition(
                f"spec.hardware_pool.hardware_class: the local backend serves {served_classes}"
                f" (and sim-* for engine 'sim'), not {hardware_class!r}"
            )
        try:
            hardware = hardware_for(hardware_class)
        except EvertuneError as err:
            raise InvalidArgument(f"spec.hardware_pool.hardware_class: {err}") from None
        # Building an engine validates its knobs against the hardware; no process starts.
        self._factory(
            self._replica_spec(target.engine),
            log_dir=self.log_dir,
            port=0,
            hardware=hardware,
            served_model_name=target.endpoint,
        )

    async def start(self, target: Target) -> list[str]:
        running = self._running.get(target.deployment_id)
        if running is not None:
            return [r.engine.base_url for r in running.replicas]
        running = _Running(target=target)
        self._running[target.deployment_id] = running
        for index in range(target.engine.replica_count):
            port = free_port()
            cores = self._place(target)
            engine = self._engine(target, port, cores)
            budget = RestartBudget(max_restarts=self.max_restarts, window_s=self.restart_window_s)
            running.replicas.append(
                _Replica(index=index, port=port, cores=cores, engine=engine, budget=budget)
            )
        try:
            for replica in running.replicas:
                await replica.engine.start()
        except BaseException:
            await self.stop(target.deployment_id)
            raise
        log.info("engines started", deployment=target.deployment_id, urls=self._urls(running))
        return self._urls(running)

    async def wait_ready(self, deployment_id: str, timeout_s: float) -> None:
        running = self._get(deployment_id)
        try:
            await asyncio.gather(*(r.engine.wait_ready(timeout_s) for r in running.replicas))
        except BaseException:
            await self.stop(deployment_id)
            raise
        for replica in running.replicas:
            if replica.supervisor is None:
                replica.supervisor = asyncio.create_task(
                    self._supervise(running, replica), name=f"supervise:{deployment_id}:{replica.index}"
                )

    async def in_flight(self, deployment_id: str) -> int | None:
        running = self._running.get(deployment_id)
        if running is None:
            return 0
        total = 0
        for replica in running.replicas:
            if not replica.engine.running:
                continue
            try:
                metrics = await replica.engine.scrape_metrics()
            except MetricsUnavailable:
                return None
            total += round(metrics.requests_running + metrics.requests_waiting)
        return total

    async def apply_routes(self, table: endpoint_pb2.RouteTable) -> None:
        """Nothing to do: the gateway routes by the KV table."""

    async def stop(self, deployment_id: str) -> None:
        running = self._running.pop(deployment_id, None)
        if running is None:
            return
        for replica in running.replicas:
            if replica.supervisor is not None and replica.supervisor is not asyncio.current_task():
                await cancel_and_wait([replica.supervisor])
        await asyncio.gather(*(r.engine.stop() for r in running.replicas), return_exceptions=True)
        log.info("engines stopped", deployment=deployment_id)

    def running(self) -> set[str]:
        return set(self._running)

    def replicas(self) -> list[tuple[str, str, int, str]]:
        """(endpoint, deployment id, replica index, base URL) of every replica whose process runs."""
        return [
            (running.target.endpoint, deployment_id, replica.index, replica.engine.base_url)
            for deployment_id, running in self._running.items()
            for replica in running.replicas
            if replica.engine.running
        ]

    async def close(self) -> None:
        for deployment_id in list(self._running):
            await self.stop(deployment_id)

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _replica_spec(spec: EngineSpec) -> EngineSpec:
        return spec if spec.replicas is None else spec.model_copy(update={"replicas": None})

    def _place(self, target: Target) -> list[int]:
        """Cores for a new replica of `target` (see `cores.place`): vLLM on this CPU only."""
        if target.engine.kind != "vllm" or target.hardware_class != "cpu":
            return []
        taken = [r.cores for running in self._running.values() for r in running.replicas]
        return place(self._allowed_cores, taken, per_engine=self._per_engine)

    def _engine(self, target: Target, port: int, cores: list[int]) -> Engine:
        return self._factory(
            self._replica_spec(target.engine),
            log_dir=self.log_dir / target.endpoint / target.deployment_id,
            port=port,
            hardware=hardware_for(target.hardware_class),
            served_model_name=target.endpoint,
            cpu_cores=cores,
        )

    @staticmethod
    def _urls(running: _Running) -> list[str]:
        return [r.engine.base_url for r in running.replicas]

    def _get(self, deployment_id: str) -> _Running:
        running = self._running.get(deployment_id)
        if running is None:
            raise FailedPrecondition(f"deployment {deployment_id} is not started on this backend")
        return running

    async def _supervise(self, running: _Running, replica: _Replica) -> None:
        """Check the replica's process every interval; restart it (bounded) when it exits."""
        target = running.target
        while True:
            await asyncio.sleep(self.health_interval_s)
            if replica.engine.running:
                continue
            url = replica.engine.base_url
            allowed = replica.budget.allow(self._now())
            await self._send(target, replica, "exited", f"engine replica {replica.index} on {url} exited")
            try:
                await replica.engine.stop()  # exited: closes its log, removes its temp folder
            except Exception as err:
                log.warning(
                    "could not clean up an exited engine replica",
                    deployment=target.deployment_id,
                    replica=replica.index,
                    error=str(err) or repr(err),
                    exc_info=True,
                )
            if not allowed:
                await self._send(
                    target,
                    replica,
                    "gave_up",
                    f"engine replica {replica.index} exited {replica.budget.used + 1} times within "
                    f"{self.restart_window_s:g} s; not restarted",
                )
                return
            replica.engine = self._engine(target, replica.port, replica.cores)
            try:
                await replica.engine.start()
                await replica.engine.wait_ready(self.ready_timeout_s)
            except EvertuneError as err:
                log.warning("engine restart failed", deployment=target.deployment_id, error=str(err))
                continue  # the next check sees it down and counts another restart
            await self._send(
                target, replica, "restarted", f"engine replica {replica.index} on {url} serves again"
            )

    async def _send(self, target: Target, replica: _Replica, what: str, detail: str) -> None:
        report = EngineReport(
            deployment_id=target.deployment_id,
            endpoint=target.endpoint,
            what=what,  # type: ignore[arg-type]
            replica=replica.index,
            restarts=replica.budget.used,
            detail=detail,
        )
        log.warning("engine " + what, deployment=target.deployment_id, replica=replica.index, detail=detail)
        try:
            await self._report(report)
        except Exception as err:
            log.error(
                "engine report failed",
                deployment=target.deployment_id,
                error=str(err) or repr(err),
                exc_info=True,
            )
