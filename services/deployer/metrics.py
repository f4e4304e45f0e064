"""The deployer's Prometheus metrics, and its local engines' own (vLLM's) metrics with labels added.

Served on `EVERTUNE_DEPLOYER_METRICS_PORT` (9405; 0 a free port, -1 off). The table with every
metric's type, labels and meaning is in docs/services/deployer.md. Counters come from
`DeployerStats` (stats.py: kept by `State.emit`, the rollouts and the engine reports); before each
scrape `DeployerMetrics.refresh` reads what only an await can: the endpoints and deployments in KV
(gauges by state) and, on the local backend, every running engine replica's `/metrics`.

- counters `evertune_deployer_events_published_total{kind}`, `_rollout_steps_total`,
  `_canary_analyses_total{verdict}`, `_rollbacks_total{reason}`, `_promotions_total`,
  `_engine_reports_total{kind}`, `_failures_total{kind}`; histogram
  `evertune_deployer_canary_analysis_seconds`;
- gauges `evertune_deployer_endpoints{state}`, `_deployments{state}`, `_engines_running`,
  `_engine_up{endpoint,deployment,replica}`, `_rollout_step_age_seconds{endpoint,deployment}` and
  `_rollout_step_limit_seconds{endpoint,deployment}` (a canary taking traffic: seconds at its
  current step, and the longest a step may take under its policy);
- `evertune_deployer_messages_*{consumer}`: its two consumers (`consumer_metrics`);
- `vllm:*`: each local engine replica's own series, labels `endpoint`, `deployment`, `replica` added.

Engine metrics: one scrape of the deployer carries every local engine's series (fetched
concurrently, 2 s each at most), each sample labelled with the endpoint, deployment and replica it
came from (replacing a label of that name, should vLLM ever send one); families of one name from
several engines are merged into one. An engine that does not answer is left out of that scrape
(`evertune_deployer_engine_up` 0). On the kubernetes backend the pods are scraped by the cluster's
own Prometheus, not through the deployer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.deployer.state import RolloutRecord
from evertune.deployer.stats import enum_label
from evertune.infra.runtime.metrics import by_label, consumer_metrics, counter, gauge, histogram
from evertune.v1 import endpoint_pb2

if TYPE_CHECKING:
    from evertune.deployer.service import DeployerService

#: Seconds one engine's /metrics may take during a scrape.
ENGINE_SCRAPE_TIMEOUT_S = 2.0
#: Labels added to every sample of an engine's metrics.
ENGINE_LABELS = ("endpoint", "deployment", "replica")


@dataclass(frozen=True)
class EngineReplica:
    """One running engine replica whose metrics the deployer serves."""

    endpoint: str  #: the endpoint it serves
    deployment: str  #: its deployment id
    replica: int  #: replica index, from 0
    base_url: str  #: where it listens (`<base_url>/metrics`)


def relabelled(text: str, labels: dict[str, str]) -> list[Metric]:
    """The families of one engine's exposition, every sample with `labels` set (pure)."""
    out = []
    for family in text_string_to_metric_families(text):
        copy = Metric(family.name, family.documentation, family.type, family.unit)
        copy.samples = [s._replace(labels={**s.labels, **labels}) for s in family.samples]
        out.append(copy)
    return out


def merged(families: Iterable[Metric]) -> list[Metric]:
    """Families of the same name (from several engines) as one, in first-seen order (pure)."""
    by_name: dict[str, Metric] = {}
    for family in families:
        into = by_name.get(family.name)
        if into is None:
            into = by_name[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
        into.samples.extend(family.samples)
    return list(by_name.values())


#: Label values exported at 0 before they are first counted (so a rate sees the first one, and
#: dashboards and alerts find the series).
VERDICTS = ("proceed", "hold", "roll_back")
ROLLBACK_REASONS = ("canary_analysis", "breach", "failure", "api")
FAILURE_KINDS = ("event_unpublished", "state_unreadable", "engine_scrape")


def step_limit_s(policy: RolloutPolicy, *, telemetry_lag_s: float) -> float:
    """The longest one canary step may last under `policy`: an analysis after each step duration
    (and the telemetry lag), every HOLD it may take and every failed analysis it tolerates."""
    analyses = 1 + policy.max_holds + policy.failures_tolerated
    return analyses * (policy.step_duration_s + telemetry_lag_s)


class DeployerMetrics:
    """The deployer's families; `refresh` (awaited before each scrape) reads KV and the engines."""

    def __init__(self, service: DeployerService) -> None:
        self.service = service
        self.endpoints: dict[str, int] = {}  #: endpoints by state, as of the last refresh
        self.deployments: dict[str, int] = {}  #: deployments by state, as of the last refresh
        self.engine_families: list[Metric] = []  #: the engines' families, as of the last refresh
        self.engine_up: dict[tuple[str, ...], float] = {}  #: (endpoint, deployment, replica) -> 1/0
        #: (endpoint, canary) -> seconds at its current step, as of the last refresh
        self.step_age: dict[tuple[str, ...], float] = {}
        #: (endpoint, canary) -> the longest a step may take under its policy, as of the last refresh
        self.step_limit: dict[tuple[str, ...], float] = {}
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def refresh(self) -> None:
        """Read the endpoints and deployments by state, and every local engine's /metrics."""
        service = self.service
        work = service.work
        if work is None:
            return
        stats = work.state.stats
        try:
            endpoints = await work.state.list_endpoints()
            deployments = [d for e in endpoints for d in await work.state.list_deployments(e.spec.name)]
            rollouts = [(e, await work.state.get_rollout(e.spec.name)) for e in endpoints]
        except Exception:  # the scrape still answers, with the counters
            stats.failure("state_unreadable")
        else:
            self._read_rollouts(rollouts)
            self.endpoints = {enum_label(n, "ENDPOINT_STATE_"): 0 for n in endpoint_pb2.EndpointState.keys()}
            for endpoint in endpoints:
                label = enum_label(endpoint_pb2.EndpointState.Name(endpoint.state), "ENDPOINT_STATE_")
                self.endpoints[label] += 1
            names = endpoint_pb2.DeploymentState.keys()
            self.deployments = {enum_label(n, "DEPLOYMENT_STATE_"): 0 for n in names}
            for deployment in deployments:
                label = enum_label(endpoint_pb2.DeploymentState.Name(deployment.state), "DEPLOYMENT_STATE_")
                self.deployments[label] += 1
        self.endpoints.pop("unspecified", None)
        self.deployments.pop("unspecified", None)
        await self._scrape_engines(service.engine_replicas())

    def _read_rollouts(self, rollouts: list[tuple[endpoint_pb2.Endpoint, RolloutRecord | None]]) -> None:
        """The age and limit of every canary step in progress (a canary taking traffic)."""
        deployer = self.service.deployments
        assert deployer is not None
        now = deployer.state.clock().timestamp()
        lag_s = deployer.canaries.telemetry_lag_s
        self.step_age, self.step_limit = {}, {}
        for endpoint, record in rollouts:
            if record is None or record.step < 0 or record.step_started_s <= 0:
                continue
            policy = deployer.policy_of(record, endpoint)
            key = (endpoint.spec.name, record.deployment_id)
            self.step_age[key] = max(0.0, now - record.step_started_s)
            self.step_limit[key] = step_limit_s(policy, telemetry_lag_s=lag_s)

    async def _scrape_engines(self, replicas: Sequence[EngineReplica]) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        session = self._session

        async def one(replica: EngineReplica) -> list[Metric] | None:
            url = f"{replica.base_url.rstrip('/')}/metrics"
            timeout = aiohttp.ClientTimeout(total=ENGINE_SCRAPE_TIMEOUT_S)
            try:
                async with session.get(url, timeout=timeout) as response:
                    if response.status != 200:
                        return None
                    text = await response.text()
                labels = {"endpoint": replica.endpoint, "deployment": replica.deployment}
                return relabelled(text, {**labels, "replica": str(replica.replica)})
            except (aiohttp.ClientError, TimeoutError, ValueError, TypeError, IndexError):
                return None

        results = await asyncio.gather(*(one(r) for r in replicas))
        self.engine_up = {}
        families: list[Metric] = []
        for replica, result in zip(replicas, results, strict=True):
            key = (replica.endpoint, replica.deployment, str(replica.replica))
            self.engine_up[key] = 0.0 if result is None else 1.0
            if result is None:
                self.service.stats.failure("engine_scrape")
            else:
                families.extend(result)
        self.engine_families = merged(families)

    def collect(self) -> Iterator[Metric]:
        service = self.service
        stats = service.stats
        yield counter(
            "evertune_deployer_events_published_total",
            "Events emitted, by kind",
            {(k,): v for k, v in stats.events.items()},
            ["kind"],
        )
        yield counter("evertune_deployer_rollout_steps_total", "Canary weights set", stats.rollout_steps)
        yield counter(
            "evertune_deployer_canary_analyses_total",
            "Canary analyses, by verdict",
            by_label(stats.analyses, VERDICTS, 0),
            ["verdict"],
        )
        yield histogram(
            "evertune_deployer_canary_analysis_seconds", "One canary analysis", stats.analysis_seconds
        )
        yield counter(
            "evertune_deployer_rollbacks_total",
            "Rollbacks, by what triggered them",
            by_label(stats.rollbacks, ROLLBACK_REASONS, 0),
            ["reason"],
        )
        yield counter(
            "evertune_deployer_promotions_total", "Deployments promoted to stable", stats.promotions
        )
        yield counter(
            "evertune_deployer_engine_reports_total",
            "Engine exits, restarts and give-ups the backend reported",
            {(k,): v for k, v in stats.engine_reports.items()},
            ["kind"],
        )
        yield counter(
            "evertune_deployer_failures_total",
            "Failures, by kind",
            by_label(stats.failures, FAILURE_KINDS, 0),
            ["kind"],
        )
        yield gauge(
            "evertune_deployer_endpoints",
            "Endpoints by state",
            {(k,): v for k, v in self.endpoints.items()},
            ["state"],
        )
        yield gauge(
            "evertune_deployer_deployments",
            "Deployments by state",
            {(k,): v for k, v in self.deployments.items()},
            ["state"],
        )
        yield gauge(
            "evertune_deployer_engines_running",
            "Engine replicas this deployer runs",
            len(service.engine_replicas()),
        )
        yield gauge(
            "evertune_deployer_engine_up",
            "1 when the engine replica's /metrics answered this scrape",
            self.engine_up,
            ENGINE_LABELS,
        )
        yield gauge(
            "evertune_deployer_rollout_step_age_seconds",
            "Seconds the canary has been at its current step (a rollout taking traffic)",
            self.step_age,
            ["endpoint", "deployment"],
        )
        yield gauge(
            "evertune_deployer_rollout_step_limit_seconds",
            "The longest a canary step may take under its rollout policy (every hold included)",
            self.step_limit,
            ["endpoint", "deployment"],
        )
        yield from consumer_metrics(
            "evertune_deployer", {name: c.stats for name, c in service.consumers.items()}
        )
        yield from self.engine_families
