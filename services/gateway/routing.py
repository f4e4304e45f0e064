"""Routing (pure): the route tables of the `routes` KV bucket, and the weighted choice of a route.

The bucket holds one serialized `RouteTable` per endpoint, under the endpoint's name. The gateway
keeps the latest table of each endpoint in `RouteBook`; a change replaces the table object, so a
request that already chose its route is not affected and new requests use the new weights.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from evertune.errors import InvalidArgument, Unavailable
from evertune.v1 import endpoint_pb2


class NoDeployment(Unavailable):
    """The endpoint exists but no route takes new requests (empty table or all weights 0)."""


def choose(table: endpoint_pb2.RouteTable, rng: random.Random) -> endpoint_pb2.Route:
    """A route picked with probability weight / sum of weights; `NoDeployment` if none has weight."""
    routes = [r for r in table.routes if r.weight > 0]
    total = sum(r.weight for r in routes)
    if total <= 0:
        raise NoDeployment(f"endpoint {table.endpoint} has no deployment taking requests")
    point = rng.random() * total
    for route in routes:
        point -= route.weight
        if point < 0:
            return route
    return routes[-1]


def parse_table(key: str, value: bytes) -> endpoint_pb2.RouteTable:
    """A RouteTable from its KV value; `InvalidArgument` when it does not decode."""
    table = endpoint_pb2.RouteTable()
    try:
        table.ParseFromString(value)
    except DecodeError as err:
        raise InvalidArgument(f"routes/{key}: not a RouteTable: {err}") from None
    if not table.endpoint:
        table.endpoint = key
    return table


@dataclass
class RouteBook:
    """The latest route table of every endpoint, as the KV watch delivered them."""

    tables: dict[str, endpoint_pb2.RouteTable] = field(default_factory=dict)  #: endpoint -> table
    #: endpoint -> unix seconds of its first table this gateway saw (the table's write time, or
    #: the time it arrived when the table has none): `/v1/models`' `created`
    first_seen: dict[str, int] = field(default_factory=dict)

    def put(self, key: str, value: bytes | None, *, now_s: float | None = None) -> None:
        """Apply one KV update: a value replaces the endpoint's table, None (a delete) removes it.
        `now_s`: the wall clock, unix seconds (default: now)."""
        if value is None:
            self.tables.pop(key, None)
            self.first_seen.pop(key, None)
            return
        table = parse_table(key, value)
        self.tables[key] = table
        if key not in self.first_seen:
            written = table.update_time.seconds if table.HasField("update_time") else 0
            self.first_seen[key] = written or int(time.time() if now_s is None else now_s)

    def created(self, endpoint: str) -> int:
        """Unix seconds the gateway dates the endpoint from (`first_seen`; 0 when unknown)."""
        return self.first_seen.get(endpoint, 0)

    def endpoints(self) -> list[str]:
        """Names of every endpoint with a table, sorted."""
        return sorted(self.tables)


#: Most characters of a client's model name an error message repeats.
MAX_MODEL_SHOWN = 128


def unknown_model(name: str) -> str:
    """The answer to a model the caller cannot use: unknown, or another tenant's (the same words).
    A name that is long or has unprintable characters is shown cut and escaped: one short line."""
    shown = name[:MAX_MODEL_SHOWN]
    if not shown.isprintable():
        shown = shown.encode("unicode_escape").decode("ascii")
    if len(name) > MAX_MODEL_SHOWN:
        shown += "..."
    return f"The model `{shown}` does not exist."


def upstream_model(route: endpoint_pb2.Route, endpoint: str, mode: str) -> str:
    """The `model` the upstream receives: the endpoint name, or the deployment id."""
    return route.deployment_id if mode == "deployment" else endpoint
