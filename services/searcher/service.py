"""The searcher service: the SearchService gRPC API, searches started by `profile.ready`, trials
over the runners' work queues. A thin shell: `SearchSupervisor` (searches.py) does the work, `run_search`
(orchestrate.py) decides.

Consumers (durable, on EVENTS):
- `searcher-trials` (`trial.completed`): hands each report to the search waiting for it;
- `searcher-profiles` (`profile.ready`): starts a search for the endpoint when its search policy
  is auto or advisory. Skipped: policy off, unknown endpoints, empty profiles, a profile that is
  not the endpoint's newest stored one (so a consumer created on an old stream does not replay
  history). While the endpoint has a search running, the newest profile's request is queued and
  starts when that search ends (`SearchSupervisor.start_or_queue`). The request id is
  `profile:<event id>`, so a redelivered event starts nothing new.
- `searcher-deletions` (`endpoint.deleted`): cancels the deleted endpoint's running search (by its
  immutable id: also when the name was created again before the event arrived) and drops its
  queued request unless the name holds a new endpoint (`SearchSupervisor.endpoint_deleted`). An event
  without an id (from before ids) cancels nothing once the name exists again.
"""

from __future__ import annotations

from typing import Any, ClassVar

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg

from evertune.domain.perfmodel import Efficiency
from evertune.errors import FailedPrecondition, NotFound
from evertune.infra.bus import DurableConsumer, PoisonMessage
from evertune.infra.bus.wiring import durable_consumers
from evertune.infra.runtime import GrpcService, ServiceContext
from evertune.infra.runtime.auth import AuthInterceptor, load_tokens
from evertune.infra.runtime.metrics import FunctionCollector
from evertune.infra.runtime.tls import Listener, ServerTls, check_exposure, tls_mode
from evertune.searcher.api import SERVICE_NAME, SearchApi
from evertune.searcher.metrics import searcher_metrics
from evertune.searcher.searches import SearchSupervisor
from evertune.searcher.settings import SearcherSettings
from evertune.searcher.space import SpaceLimits
from evertune.searcher.stats import SearcherStats
from evertune.searcher.trial_bus import TrialBus
from evertune.searcher.wiring import wiring
from evertune.v1 import endpoint_pb2, events_pb2
from evertune.v1 import search_service_pb2 as pb


class SearcherService(GrpcService):
    name: ClassVar[str] = "searcher"
    description: ClassVar[str] = "Candidate space, model-ranked trials, gates, winner"
    needs_store: ClassVar[bool] = True

    def __init__(
        self,
        settings: SearcherSettings,
        *,
        limits: SpaceLimits | None = None,
        efficiency: dict[str, Efficiency] | None = None,
        durable_prefix: str = "searcher",
    ) -> None:
        """`limits` narrows the candidate space and `efficiency` fixes the model's factors per class
        (tests and benchmarks); `durable_prefix` names the consumers."""
        self.api = SearchApi()
        self.tokens = load_tokens(
            token_file=settings.token_file,
            tokens=settings.tokens.get_secret_value(),
            file_setting="EVERTUNE_SEARCHER_TOKEN_FILE",
            tokens_setting="EVERTUNE_SEARCHER_TOKENS",
        )
        self.tls = ServerTls.of(settings, "EVERTUNE_SEARCHER_")
        check_exposure(
            Listener("EVERTUNE_SEARCHER_", "GRPC_HOST", "tokens", "TOKEN_FILE", "ALLOW_PLAINTEXT_TOKENS"),
            host=settings.grpc_host,
            has_credentials=self.tokens is not None,
            tls=self.tls is not None,
            allow_unauthenticated=settings.allow_unauthenticated,
            allow_plaintext=settings.allow_plaintext_tokens,
        )
        super().__init__(
            host=settings.grpc_host,
            port=settings.grpc_port,
            add_servicers=[self.api.add_to],
            service_names=[SERVICE_NAME],
            interceptors=[AuthInterceptor(self.tokens)],
            credentials=self.tls.grpc_credentials() if self.tls is not None else None,
        )
        self.api.stopping = self.stopping
        self.settings = settings
        self._limits = limits
        self._efficiency = efficiency
        self._durable_prefix = durable_prefix
        self.searches: SearchSupervisor | None = None
        self.trials: TrialBus | None = None
        self.consumers: dict[str, DurableConsumer] = {}  #: durable name -> consumer (once started)
        self.profiles_skipped = 0  #: profile.ready events that started no search
        self.profiles_queued = 0  #: profile.ready events queued behind a running search
        self.profiles_started = 0  #: profile.ready events that started a search
        self.metrics_registry.register(FunctionCollector(lambda: searcher_metrics(self.read_stats())))

    async def on_start(self, ctx: ServiceContext) -> None:
        assert ctx.store is not None, "the searcher needs the store (needs_store)"
        self.trials = TrialBus(ctx.js, ctx.store)
        self.searches = SearchSupervisor(
            self.settings,
            js=ctx.js,
            store=ctx.store,
            data_dir=ctx.shared.data_dir.expanduser(),
            execute=self.trials.execute,
            limits=self._limits,
            efficiency=self._efficiency,
        )
        await self.searches.open()
        self.api.searches = self.searches
        self.consumers = durable_consumers(ctx.js, wiring(self._durable_prefix), self, source=self.name)
        await self.serve_metrics(ctx, host=self.settings.metrics_host, port=self.settings.metrics_port)
        for durable, consumer in self.consumers.items():
            self.spawn(consumer.run(self.stopping), name=durable)
        await super().on_start(ctx)
        self.log.info("searcher serving", address=self.grpc.address, tls=tls_mode(self.tls))

    async def on_stop(self) -> None:
        if self.searches is not None:
            await self.searches.close()
        await super().on_stop()

    def read_stats(self) -> SearcherStats:
        """The stats (`stats.py`), with what other parts keep read in now: searches running and
        queued, the trial bus's jobs and reports, profile.ready results, the consumers."""
        searches, trials = self.searches, self.trials
        stats = searches.stats if searches is not None else SearcherStats()
        stats.running = searches.running if searches else 0
        stats.queued = searches.queued_count if searches else 0
        stats.completed = searches.completed if searches else 0
        stats.jobs_published = trials.published if trials else 0
        stats.trial_reports = trials.reports if trials else 0
        stats.trials_waiting = trials.waiting if trials else 0
        stats.trials_missing = trials.missing if trials else 0
        stats.profiles = {
            "started": self.profiles_started,
            "queued": self.profiles_queued,
            "skipped": self.profiles_skipped,
        }
        stats.consumers = {name: c.stats for name, c in self.consumers.items()}
        return stats

    def details(self) -> dict[str, Any]:
        return self.read_stats().details()

    async def _on_deleted(self, msg: Msg) -> None:
        """Stop searching for an endpoint that was deleted (see the module doc)."""
        assert self.searches is not None
        event = _event_of(msg)
        name = event.endpoint_deleted.name or event.endpoint
        if not name:
            return
        reused = await self.searches.endpoint(name) is not None
        if reused and not event.endpoint_uid:
            return  # the name holds a new endpoint, and nothing says which searches were the old one's
        await self.searches.endpoint_deleted(name, endpoint_uid=event.endpoint_uid, name_reused=reused)

    async def _on_profile(self, msg: Msg) -> None:
        """Start a search for a new profile when the endpoint's policy allows (see the module doc)."""
        assert self.searches is not None
        event = _event_of(msg)
        ready = event.profile_ready
        if ready.empty_reason or not ready.request_count or not event.endpoint:
            self.profiles_skipped += 1
            return
        if ready.request_count < self.settings.min_profile_requests:
            self.profiles_skipped += 1
            self.log.info(
                "profile too small for a search",
                endpoint=event.endpoint,
                profile=ready.profile_id,
                requests=ready.request_count,
                needed=self.settings.min_profile_requests,
            )
            return
        endpoint = await self.searches.endpoint(event.endpoint)
        if endpoint is None:
            self.profiles_skipped += 1
            self.log.info("profile of an unknown endpoint; no search", endpoint=event.endpoint)
            return
        policy = endpoint.spec.search_policy
        if policy == endpoint_pb2.SEARCH_POLICY_OFF:
            self.profiles_skipped += 1
            self.log.info("search policy off; no search", endpoint=event.endpoint, profile=ready.profile_id)
            return
        if await self.searches.latest_profile_id(event.endpoint) != ready.profile_id:
            # A newer profile exists (or this one is not stored): searching an old one would tune
            # for traffic that has moved on; also keeps a first start from replaying history.
            self.profiles_skipped += 1
            self.log.info("profile superseded; no search", endpoint=event.endpoint, profile=ready.profile_id)
            return
        request = pb.StartSearchRequest(
            request_id=f"profile:{event.id}", endpoint=event.endpoint, profile_id=ready.profile_id
        )
        try:
            started = await self.searches.start_or_queue(request, trigger="profile.ready", cause_id=event.id)
            if started is None:
                self.profiles_queued += 1
            else:
                self.profiles_started += 1
        except (FailedPrecondition, NotFound) as err:
            self.profiles_skipped += 1
            self.log.info("profile.ready started no search", endpoint=event.endpoint, reason=str(err))


def _event_of(msg: Msg) -> events_pb2.Event:
    """The event a message carries (an undecodable one is poison: retrying cannot mend it)."""
    try:
        return events_pb2.Event.FromString(msg.data)
    except DecodeError as err:
        raise PoisonMessage(f"undecodable event: {err}") from None
