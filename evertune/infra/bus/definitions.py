"""JetStream streams and KV buckets, declared from `infra/nats/jetstream.toml`.

Declaring is idempotent: a stream or bucket that exists with the same configuration is left as it
is, one whose configuration differs is updated in place (messages kept), a missing one is created.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BucketNotFoundError, NotFoundError

from evertune.errors import SettingsError
from evertune.infra.package_data import INFRA

DEFAULT_DEFINITIONS = INFRA / "nats" / "jetstream.toml"


@dataclass(frozen=True)
class StreamDef:
    """One JetStream stream, as written in the definitions file."""

    name: str  #: stream name, upper case by convention
    description: str  #: shown by `nats stream info`
    subjects: tuple[str, ...]  #: subjects the stream captures
    retention: str  #: "limits" (keep until age/size) or "workqueue" (removed when acked)
    storage: str  #: "file" or "memory"
    max_age_s: float  #: messages older than this are removed
    max_bytes: int  #: size cap; the oldest messages go first
    duplicate_window_s: float  #: window in which a repeated Nats-Msg-Id is dropped

    def config(self, replicas: int) -> StreamConfig:
        return StreamConfig(
            name=self.name,
            description=self.description,
            subjects=list(self.subjects),
            retention=RetentionPolicy(self.retention),
            storage=StorageType(self.storage),
            max_age=self.max_age_s,
            max_bytes=self.max_bytes,
            duplicate_window=self.duplicate_window_s,
            num_replicas=replicas,
        )


@dataclass(frozen=True)
class KvDef:
    """One key-value bucket."""

    bucket: str  #: bucket name
    description: str  #: what it holds
    history: int  #: revisions kept per key
    ttl_s: float = 0.0  #: seconds a key lives after its last write (0 = forever)

    def config(self, replicas: int) -> KeyValueConfig:
        return KeyValueConfig(
            bucket=self.bucket,
            description=self.description,
            history=self.history,
            ttl=self.ttl_s or None,
            replicas=replicas,
        )


@dataclass(frozen=True)
class Definitions:
    streams: tuple[StreamDef, ...]
    buckets: tuple[KvDef, ...]


def load_definitions(path: Path = DEFAULT_DEFINITIONS) -> Definitions:
    """Read the definitions file; a malformed file raises a one-line `SettingsError` naming it."""
    try:
        raw = tomllib.loads(path.read_text())
        streams = tuple(
            StreamDef(
                name=s["name"],
                description=s.get("description", ""),
                subjects=tuple(s["subjects"]),
                retention=s.get("retention", "limits"),
                storage=s.get("storage", "file"),
                max_age_s=float(s.get("max_age_s", 0)),
                max_bytes=int(s.get("max_bytes", -1)),
                duplicate_window_s=float(s.get("duplicate_window_s", 120)),
            )
            for s in raw.get("stream", [])
        )
        buckets = tuple(
            KvDef(
                bucket=k["bucket"],
                description=k.get("description", ""),
                history=int(k.get("history", 1)),
                ttl_s=float(k.get("ttl_s", 0)),
            )
            for k in raw.get("kv", [])
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as err:
        raise SettingsError(f"bad JetStream definitions in {path}: {err}") from None
    return Definitions(streams=streams, buckets=buckets)


@dataclass(frozen=True)
class DeclareReport:
    """What `declare` did; a second declare with unchanged definitions reports only `unchanged`."""

    created: tuple[str, ...]
    updated: tuple[str, ...]
    unchanged: tuple[str, ...]


def _differs(current: StreamConfig, wanted: StreamConfig) -> bool:
    fields = ("subjects", "retention", "storage", "max_age", "max_bytes", "duplicate_window", "description")
    return any(getattr(current, f) != getattr(wanted, f) for f in fields)


async def declare(js: JetStreamContext, definitions: Definitions, *, replicas: int = 1) -> DeclareReport:
    """Create or update every stream and bucket in `definitions`. Safe to run at every start."""
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    for stream in definitions.streams:
        wanted = stream.config(replicas)
        try:
            info = await js.stream_info(stream.name)
        except NotFoundError:
            await js.add_stream(wanted)
            created.append(stream.name)
            continue
        if _differs(info.config, wanted):
            await js.update_stream(wanted)
            updated.append(stream.name)
        else:
            unchanged.append(stream.name)
    for bucket in definitions.buckets:
        name = f"KV_{bucket.bucket}"
        try:
            await js.key_value(bucket.bucket)
        except BucketNotFoundError:
            await js.create_key_value(bucket.config(replicas))
            created.append(name)
            continue
        unchanged.append(name)
    return DeclareReport(created=tuple(created), updated=tuple(updated), unchanged=tuple(unchanged))
