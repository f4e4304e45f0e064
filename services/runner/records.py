"""The runner's side of the store: the `trials` table (store a result once, find a stored one, read
a reference) and the profiler's `profiles` table (read a stored trace; read only)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

from google.protobuf.message import DecodeError

from evertune.domain.engines import EngineSpec
from evertune.errors import EvertuneError
from evertune.infra.store import Store
from evertune.runner.report import COLUMNS, dedup_token
from evertune.runner.trace import PROFILES_TABLE, StoredTrace, StoredTraceRef
from evertune.runner.trial_runner import Reference
from evertune.v1 import events_pb2

TABLE = "trials"


class TrialRecords:
    """Reads and writes trial rows in one store's database."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def _table(self) -> str:
        return f"{self.store.database}.{TABLE}"

    async def insert(self, values: Sequence[Any], *, trial_id: str, job_id: str) -> None:
        """Store one row (a repeat of the same job is dropped by its deduplication token)."""
        await self.store.insert(
            self._table, [list(values)], COLUMNS, dedup_token=dedup_token(trial_id, job_id)
        )

    async def completed(self, job_id: str) -> events_pb2.TrialCompleted | None:
        """The stored result of a job, if a runner already finished it."""
        rows = await self.store.query(
            f"SELECT completed_pb FROM {self._table} WHERE job_id = {{job:String}} "
            "ORDER BY finished_at LIMIT 1",
            {"job": job_id},
        )
        if not rows:
            return None
        return _decode(rows[0][0])

    async def reference(self, trial_id: str) -> Reference | None:
        """The golden answers of trial `trial_id` (its latest successful row that has some)."""
        rows = await self.store.query(
            f"SELECT golden_set, golden_hashes, golden_alternatives, completed_pb FROM {self._table} "
            "WHERE trial_id = {trial:String} AND status = 'ok' AND length(golden_hashes) > 0 "
            "ORDER BY finished_at DESC LIMIT 1",
            {"trial": trial_id},
        )
        if not rows:
            return None
        golden_set, hashes, alternatives, payload = rows[0]
        try:
            spec = EngineSpec.from_proto(_decode(payload).engine_config)
        except (DecodeError, EvertuneError):
            return None
        return Reference(
            trial_id=trial_id,
            golden_set_id=str(golden_set),
            chains=[[int(h) for h in chain] for chain in hashes],
            spec=spec,
            alternatives=[[[int(h) for h in top] for top in answer] for answer in alternatives],
        )

    async def stored_trace(self, ref: StoredTraceRef) -> StoredTrace | None:
        """The trace the profiler stored with profile `ref.profile_id`, or None when there is none."""
        table = f"{ref.database or self.store.database}.{PROFILES_TABLE}"
        rows = await self.store.query(
            f"SELECT trace_jsonl, trace_sha256 FROM {table} FINAL WHERE profile_id = {{id:String}} LIMIT 1",
            {"id": ref.profile_id},
        )
        if not rows:
            return None
        return StoredTrace(jsonl=str(rows[0][0]), sha256=str(rows[0][1]))


def _decode(data: str) -> events_pb2.TrialCompleted:
    """The stored payload (base64 of the serialized TrialCompleted)."""
    try:
        return events_pb2.TrialCompleted.FromString(base64.b64decode(data))
    except (ValueError, binascii.Error) as err:
        raise DecodeError(str(err)) from None
