"""Which searches belong to the endpoint a name holds now (`records.Incarnation`): those started on
its id; for an endpoint stored before endpoints had ids, those without an id started since it was
created. The rule for one search (`holds`, GetSearch and the rest) and the rule for the table
(`where`, ListSearches) agree, on a real store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from evertune.infra.store import Store, migrate
from evertune.searcher.records import Incarnation, SearchRecord, SearchRecords
from evertune.v1 import search_service_pb2 as pb

T0 = datetime(2026, 12, 1, tzinfo=UTC)
OLD_ID, NEW_ID = "ep-" + "b" * 24, "ep-" + "a" * 24


def _record(search_id: str, endpoint: str, uid: str, created: datetime) -> SearchRecord:
    search = pb.Search(id=search_id, endpoint=endpoint, endpoint_uid=uid, state=pb.SEARCH_STATE_RUNNING)
    search.create_time.FromDatetime(created)
    return SearchRecord(search=search, request_id=search_id)


RECORDS = [
    _record("s-old-endpoint", "foo", OLD_ID, T0 - timedelta(days=2)),
    _record("s-new-endpoint", "foo", NEW_ID, T0 + timedelta(hours=1)),
    _record("s-no-id-before", "foo", "", T0 - timedelta(days=1)),
    _record("s-no-id-after", "foo", "", T0 + timedelta(hours=2)),
    _record("s-other-name", "bar", NEW_ID, T0 + timedelta(hours=3)),
]


async def test_holds_and_where_agree_on_which_searches_an_endpoint_holds(store: Store) -> None:
    await migrate(store)
    records = SearchRecords(store)
    for record in RECORDS:
        await records.save(record)
    cases = {
        Incarnation(name="foo", uid=NEW_ID, created=T0): {"s-new-endpoint"},
        Incarnation(name="foo", uid=OLD_ID, created=T0 - timedelta(days=3)): {"s-old-endpoint"},
        # an endpoint stored before ids: the id-less searches since its creation, none with an id
        Incarnation(name="foo", uid="", created=T0): {"s-no-id-after"},
        Incarnation(name="bar", uid="", created=T0): set(),
    }
    for incarnation, expected in cases.items():
        held = {r.search_id for r in RECORDS if incarnation.holds(r.search)}
        page, more = await records.page(endpoint="", states=[], limit=100, offset=0, incarnation=incarnation)
        unfinished = await records.unfinished(incarnation=incarnation)
        assert held == expected, incarnation
        assert {r.search_id for r in page} == expected and not more, incarnation
        assert {r.search_id for r in unfinished} == expected, incarnation
    # By name alone (an operator's listing): every search of the name, whatever its endpoint.
    by_name, _ = await records.page(endpoint="foo", states=[], limit=100, offset=0)
    assert len(by_name) == 4
