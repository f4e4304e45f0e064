"""Before a search's winner is rolled out: the search and its winning trial read back from the store.

A `search.completed` event is only a message on the bus, and anyone who can publish there could
write one: a verified WINNER for any endpoint, with any engine configuration (any model path). So
the deployer acts on it only when the store says the same (`winner_refusal`, pure):

- the `searches` row of the search exists, belongs to the event's endpoint, and ended with a
  winner (the searcher saves it before it publishes the event);
- the winning trial's `trials` row exists (the runner stores it before it publishes
  `trial.completed`), belongs to the same search and endpoint, passed every gate, ran on real
  hardware unless the pool is simulated, and measured the configuration the event names (knob
  for knob: what a runner fills in itself, the engine kind of a simulated runner, its local model
  path, its default KV cache where the winner leaves it unset, is not compared);
- the winner serves the endpoint's own model: a search tunes knobs, never the model, so a winner
  naming another path (another tenant's model folder, say) is refused.

A search on a simulated pool (`sim-*`) may name no trial: its winner is the model's. `StoredWinners`
is the shell that reads the two rows.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from evertune.domain.engines import EngineSpec
from evertune.domain.engines.errors import InvalidEngineConfig
from evertune.infra.store import Store
from evertune.v1 import events_pb2


@dataclass(frozen=True)
class StoredSearch:
    """What the `searches` table says of a search (its latest revision)."""

    endpoint: str  #: the endpoint it searched for
    endpoint_uid: str  #: that endpoint's immutable id ("" for a search stored before ids)
    outcome: str  #: "winner", "no_improvement", "failed", ...


@dataclass(frozen=True)
class StoredTrial:
    """What the `trials` table says of a trial."""

    endpoint: str  #: the endpoint it measured for
    completed: events_pb2.TrialCompleted  #: the report the runner stored (and published)
    simulated: bool  #: measured by the performance model, not on hardware


def winner_refusal(
    *,
    endpoint: str,
    endpoint_uid: str,
    model: str,
    pool: str,
    done: events_pb2.SearchCompleted,
    search: StoredSearch | None,
    trial: StoredTrial | None,
) -> str:
    """Why the winner of `done` (about `endpoint`, whose immutable id is `endpoint_uid` and model
    `model`, served from hardware class `pool`) may not be rolled out by what the store holds; ""
    when it may."""
    if search is None:
        return f"search {done.search_id} is not in the store"
    if search.endpoint != endpoint:
        return f"search {done.search_id} belongs to endpoint {search.endpoint!r}, not {endpoint!r}"
    if search.endpoint_uid != endpoint_uid:
        return (
            f"search {done.search_id} was started on an earlier endpoint named {endpoint!r} "
            f"(id {search.endpoint_uid or 'none'}), not on this one ({endpoint_uid})"
        )
    if search.outcome != "winner":
        return f"search {done.search_id} ended {search.outcome!r} in the store, not with a winner"
    if not done.winner_trial_id:
        return "" if pool.startswith("sim-") else "the winner names no trial measured on hardware"
    if trial is None:
        return f"trial {done.winner_trial_id} is not in the store"
    result = trial.completed
    if trial.endpoint != endpoint or result.search_id != done.search_id:
        return f"trial {done.winner_trial_id} belongs to another search or endpoint"
    if not result.passed:
        return f"trial {done.winner_trial_id} did not pass its gates"
    if trial.simulated and not pool.startswith("sim-"):
        return f"trial {done.winner_trial_id} was simulated, not measured on hardware"
    try:
        measured = EngineSpec.from_proto(result.engine_config, default_model=model)
        named = EngineSpec.from_proto(done.winner, default_model=model)
    except InvalidEngineConfig as err:
        return f"the winner's configuration does not read back: {err}"
    if named.model != model:
        return f"the winner serves {named.model!r}, not the endpoint's model"
    if _knobs(measured, like=named) != _knobs(named, like=named):
        return f"trial {done.winner_trial_id} measured another configuration than the event names"
    return ""


def _knobs(spec: EngineSpec, *, like: EngineSpec) -> dict[str, object]:
    """The knobs of `spec` a search chose, as `like` names them: without the engine kind and the
    model (a runner's own), and without the KV cache size where `like` leaves it to the runner."""
    knobs = spec.model_dump(exclude={"kind", "model"})
    if like.kv_cache_space_gib is None:
        knobs.pop("kv_cache_space_gib")
    return knobs


class StoredWinners:
    """Reads a search's row and its winning trial's row (FINAL: the latest revision, once)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def search(self, search_id: str) -> StoredSearch | None:
        rows = await self.store.query(
            "SELECT endpoint, endpoint_uid, outcome FROM searches FINAL WHERE search_id = {s:String} "
            "ORDER BY revision DESC LIMIT 1",
            {"s": search_id},
        )
        if not rows:
            return None
        endpoint, uid, outcome = rows[0]
        return StoredSearch(endpoint=str(endpoint), endpoint_uid=str(uid), outcome=str(outcome))

    async def trial(self, trial_id: str) -> StoredTrial | None:
        rows = await self.store.query(
            "SELECT endpoint, completed_pb, simulated FROM trials FINAL WHERE trial_id = {t:String} LIMIT 1",
            {"t": trial_id},
        )
        if not rows:
            return None
        endpoint, payload, simulated = rows[0]
        try:
            completed = events_pb2.TrialCompleted.FromString(base64.b64decode(payload))
        except (DecodeError, ValueError, binascii.Error):
            return None
        return StoredTrial(endpoint=str(endpoint), completed=completed, simulated=bool(simulated))

    async def refusal(
        self, *, endpoint: str, endpoint_uid: str, model: str, pool: str, done: events_pb2.SearchCompleted
    ) -> str:
        """`winner_refusal` of `done` against the rows the store holds."""
        search = await self.search(done.search_id)
        trial = await self.trial(done.winner_trial_id) if done.winner_trial_id else None
        return winner_refusal(
            endpoint=endpoint,
            endpoint_uid=endpoint_uid,
            model=model,
            pool=pool,
            done=done,
            search=search,
            trial=trial,
        )
