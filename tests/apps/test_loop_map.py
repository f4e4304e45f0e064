"""docs/loop.md is the services' wirings rendered, and each wiring says what its service's code does:
the event kinds it publishes, the store tables it reads and writes, handlers that exist."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest

from evertune.apps import loop_map
from evertune.apps.services import SERVICE_NAMES
from evertune.infra.bus.wiring import Consumes, Delivery, Wiring, handler_of
from evertune.infra.events import EventKind
from evertune.infra.runtime import Service
from tests import checkout

PAGE = checkout.ROOT / "docs" / "loop.md"
#: Every table the store's migrations create.
TABLES = ("requests", "profiles", "trials", "searches")


def _wiring(service: str) -> Wiring:
    (found,) = (w for w in loop_map.wirings() if w.service == service)
    return found


def _sources(service: str) -> list[Path]:
    """The service's modules, its wiring aside (it names what it consumes)."""
    folder = checkout.ROOT / "services" / service
    return [p for p in sorted(folder.rglob("*.py")) if p.name != "wiring.py"]


def published_kinds(source: str) -> set[EventKind]:
    """Event kinds a module names other than to subscribe (`event_filter_subject(...)`) or to
    compare (`kind == EventKind.X`): the kinds it publishes."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "event_filter_subject":
            skipped.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.Compare):
            skipped.update(id(n) for n in ast.walk(node))
    return {
        EventKind[node.attr]
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "EventKind"
        and id(node) not in skipped
        and node.attr in EventKind.__members__
    }


def named_tables(source: str) -> set[str]:
    """Tables a module names: in SQL (`FROM t`, `FROM {db}.t`) or as a constant (`TABLE = "t"`)."""
    sql = r"\bFROM\s+(\{[^}]*\}\.)?%s\b"
    constant = r'^[A-Z_]+\s*(:\s*[\w\[\]]+\s*)?=\s*"%s"'
    return {t for t in TABLES if re.search(f"{sql % t}|{constant % t}", source, re.MULTILINE)}


def written_tables(source: str) -> set[str]:
    """Tables a module inserts into: by convention a writing module names its table `TABLE`."""
    if ".insert(" not in source:
        return set()
    found = re.search(r'^TABLE\s*(?::\s*\w+\s*)?=\s*"(\w+)"', source, re.MULTILINE)
    return {found.group(1)} if found else set()


def test_the_page_is_the_code_rendered() -> None:
    page = PAGE.read_text() if PAGE.exists() else ""
    assert page == loop_map.render(loop_map.wirings()), (
        f"docs/loop.md disagrees with the services' wirings: regenerate it with `{loop_map.REGENERATE}`"
    )


@pytest.mark.parametrize("wiring", loop_map.wirings(), ids=lambda w: w.service)
def test_every_published_kind_is_declared(wiring: Wiring) -> None:
    used: set[EventKind] = set()
    for path in _sources(wiring.service):
        used |= published_kinds(path.read_text())
    assert used == set(wiring.events), f"{wiring.service}: publishes {sorted(used)}, declares {wiring.events}"


@pytest.mark.parametrize("wiring", loop_map.wirings(), ids=lambda w: w.service)
def test_store_tables_are_declared(wiring: Wiring) -> None:
    named: set[str] = set()
    written: set[str] = set()
    for path in _sources(wiring.service):
        source = path.read_text()
        named |= named_tables(source)
        written |= written_tables(source)
    assert named == set(wiring.reads_tables) | set(wiring.writes_tables), wiring.service
    assert written == set(wiring.writes_tables), wiring.service


def _service_class(name: str) -> type[Service]:
    module = importlib.import_module(f"evertune.{name.replace('-', '_')}.service")
    (cls,) = (
        c
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, Service) and getattr(c, "name", None) == name
    )
    return cls


def _instance_attributes(cls: type) -> set[str]:
    """Attributes the class's `__init__`s assign on `self` (the searcher's `trials`)."""
    found: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not hasattr(init, "__code__"):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        found |= {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        }
    return found


def test_every_service_has_a_wiring() -> None:
    assert sorted(w.service for w in loop_map.wirings()) == sorted(SERVICE_NAMES)


@pytest.mark.parametrize("wiring", loop_map.wirings(), ids=lambda w: w.service)
def test_handlers_are_the_services_own(wiring: Wiring) -> None:
    cls = _service_class(wiring.service)
    for consumes in wiring.consumes:
        if consumes.delivery == Delivery.ON_DEMAND:
            continue
        first = consumes.handler.split(".")[0]
        assert hasattr(cls, first) or first in _instance_attributes(cls), (wiring.service, consumes.handler)


def test_the_profilers_sink_reads_what_its_wiring_says() -> None:
    from evertune.profiler.service import sink_config
    from evertune.profiler.settings import ProfilerSettings

    settings = ProfilerSettings()
    spec = sink_config(settings).batch_spec()
    sink = _wiring("profiler").one(Delivery.BATCHING)
    assert (sink.source, sink.subject, sink.durable) == (spec.stream, spec.filter_subject, spec.durable)


def test_the_loop_bends_as_it_does() -> None:
    """drift.detected reaches the profiler; profile.ready goes back to the sla-monitor and on to
    the searcher; the searcher reads the profiler's profiles, the deployer the gateway's requests
    (through the profiler's sink) and the runner's trials."""
    lines = loop_map.diagram(loop_map.wirings())
    assert '    sla_monitor -->|"drift.detected"| profiler' in lines
    assert '    profiler -->|"profile.ready"| sla_monitor' in lines
    assert '    profiler -->|"profile.ready"| searcher' in lines
    assert "    t_profiles -.-> searcher" in lines
    assert "    t_requests -.-> deployer" in lines
    assert "    t_trials -.-> deployer" in lines
    assert "    deployer ==> kv_routes" in lines and "    kv_routes ==> gateway" in lines


@pytest.mark.parametrize(
    ("filter_subject", "pattern", "expected"),
    [
        ("evertune.telemetry.>", "evertune.telemetry.<endpoint>", True),
        ("evertune.jobs.cpu", "evertune.jobs.<hardware_class>", True),
        ("evertune.events.sla.breach.*", "evertune.events.sla.breach.<endpoint>", True),
        ("evertune.events.sla.breach.*", "evertune.events.sla.resolved.<endpoint>", False),
        ("evertune.events.>", "evertune.events.sla.breach.<endpoint>", True),
        ("evertune.events.sla.breach", "evertune.events.sla.breach.<endpoint>", False),
        ("evertune.svc.profiler.profile", "evertune.telemetry.<endpoint>", False),
    ],
)
def test_matches(filter_subject: str, pattern: str, expected: bool) -> None:
    assert loop_map.matches(filter_subject, pattern) is expected


def test_published_kinds_skips_subscriptions_and_comparisons() -> None:
    source = (
        "a = new_event(EventKind.SLA_BREACH)\n"
        "b = event_filter_subject(EventKind.PROFILE_READY)\n"
        "c = x.kind == EventKind.SEARCH_COMPLETED\n"
    )
    assert published_kinds(source) == {EventKind.SLA_BREACH}


def test_a_consumes_names_its_one_event_kind() -> None:
    assert Consumes(
        Delivery.CORE, source="", subject="evertune.events.drift.detected.>", handler="h"
    ).kind == (EventKind.DRIFT_DETECTED)
    assert Consumes(Delivery.CORE, source="", subject="evertune.events.>", handler="h").kind is None
    assert Consumes(Delivery.CORE, source="", subject="evertune.telemetry.>", handler="h").kind is None


def test_handler_of_follows_attribute_paths() -> None:
    class Inner:
        def run(self) -> str:
            return "ran"

    class Outer:
        inner = Inner()
        value = 3

    assert handler_of(Outer(), "inner.run")() == "ran"
    with pytest.raises(TypeError):
        handler_of(Outer(), "value")


CONTRACTS = checkout.ROOT / "docs" / "contracts.md"


def contracts_table(header: str) -> dict[str, list[str]]:
    """The rows of docs/contracts.md's table whose header row is `header`: first cell (without
    backticks) -> every cell."""
    lines = CONTRACTS.read_text().splitlines()
    start = lines.index(header)
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    return rows


def services_named(cell: str) -> set[str]:
    """The services a cell names, outside its parentheses."""
    bare = re.sub(r"\([^)]*\)", "", cell)
    return {s for s in SERVICE_NAMES if re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", bare)}


def test_contracts_say_who_consumes_each_event() -> None:
    rows = contracts_table("| kind | emitted by | consumed by | payload | default severity | figures |")
    assert set(rows) == {k.value for k in EventKind}
    wirings = loop_map.wirings()
    for kind in EventKind:
        publishers = {w.service for w in wirings if kind in w.events}
        consumers = {w.service for w in wirings for c in w.consumes if c.kind == kind}
        emitted_by, consumed_by = rows[kind.value][1], rows[kind.value][2]
        if publishers:
            assert services_named(emitted_by) == publishers, kind
        assert services_named(consumed_by) == consumers, kind


def test_contracts_say_who_writes_and_reads_each_table() -> None:
    rows = contracts_table("| table | written by | read by | holds |")
    wirings = loop_map.wirings()
    assert set(rows) == {t for w in wirings for t in (*w.reads_tables, *w.writes_tables)}
    for table, cells in rows.items():
        writers = {w.service for w in wirings if table in w.writes_tables}
        readers = {w.service for w in wirings if table in w.reads_tables} - writers
        assert (services_named(cells[1]), services_named(cells[2])) == (writers, readers), table


def test_tables_are_found_in_sql_and_constants() -> None:
    source = (
        'TABLE = "searches"\n'
        'TRIALS_TABLE: Final = "trials"\n'
        'Q = "SELECT x FROM profiles FINAL"\n'
        'R = f"SELECT y FROM {db}.requests"\n'
        "await self.store.insert(TABLE, rows)\n"
        'summary = {"requests": 3}\n'
    )
    assert named_tables(source) == {"searches", "trials", "profiles", "requests"}
    assert written_tables(source) == {"searches"}
    assert named_tables('summary = {"requests": 3}\n') == set()
    assert written_tables('TABLE = "trials"\n') == set()
