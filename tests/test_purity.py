"""tests/purity.py: which tests are `pure`, and the guard that fails a pure test that starts NATS,
opens a store or starts an engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evertune.domain.engines.process import ProcessEngine
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.store import open_store
from tests import purity


def _starts_nats(folder: Path) -> EmbeddedNats:
    return EmbeddedNats(folder)


def _calls_a_helper_that_starts_nats(folder: Path) -> object:
    return _starts_nats(folder)


def _runs_the_cli() -> None:
    subprocess.run([sys.executable, "-m", "evertune", "status"], check=False)


def _computes() -> int:
    return sum(range(10))


def test_a_starter_is_seen_in_the_code_and_in_the_helpers_it_calls() -> None:
    assert purity.starts_something(_starts_nats)
    assert purity.starts_something(_calls_a_helper_that_starts_nats)
    assert purity.starts_something(_runs_the_cli)
    assert not purity.starts_something(_computes)


def test_this_module_imports_starters_so_none_of_its_tests_is_pure(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("pure") is None
    assert purity.why_impure(request.node) == "tests.test_purity imports a starter or runs the CLI"


async def test_the_guard_fails_a_pure_test_that_starts_nats_a_store_or_an_engine(tmp_path: Path) -> None:
    with purity.running_pure("tests/x.py::test_y"):
        with pytest.raises(pytest.fail.Exception, match=r"^pure test tests/x.py::test_y started NATS"):
            await EmbeddedNats(tmp_path / "nats").start()
        with pytest.raises(pytest.fail.Exception, match="opened a store"):
            await open_store(f"chdb://{tmp_path / 'store'}", database="guarded")
        with pytest.raises(pytest.fail.Exception, match="started an engine"):
            await ProcessEngine.start(object())  # type: ignore[arg-type]
    assert not (tmp_path / "store").exists()  # refused before anything was made
