"""What evertune reads at run time is package data: in this editable install it is the checkout's
own `infra/` and `proto/` (one source), and pyproject.toml ships every file of them in the wheel
(`.ci/wheel-check` builds and runs that wheel)."""

from __future__ import annotations

import fnmatch
import tomllib

from evertune.infra import protogen
from evertune.infra.bus.definitions import DEFAULT_DEFINITIONS
from evertune.infra.nats_server import CLUSTER_CONFIG
from evertune.infra.package_data import INFRA, PROTO
from evertune.infra.store.migrations import MIGRATIONS_DIR
from tests import checkout


def test_the_data_is_the_checkouts_own() -> None:
    assert INFRA == checkout.INFRA and PROTO == checkout.ROOT / "proto"
    for path in (DEFAULT_DEFINITIONS, CLUSTER_CONFIG):
        assert path.is_file() and path.is_relative_to(INFRA)
    assert sorted(MIGRATIONS_DIR.glob("*.sql")) and MIGRATIONS_DIR.is_relative_to(INFRA)
    assert protogen.proto_files() and protogen.PROTO_ROOT == PROTO


def test_pyproject_ships_every_file_of_the_data_packages() -> None:
    tool = tomllib.loads((checkout.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, folder in (("evertune.definitions", "infra"), ("evertune.contracts", "proto")):
        assert package in tool["packages"] and tool["package-dir"][package] == folder
        patterns = tool["package-data"][package]
        root = checkout.ROOT / folder
        files = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
        unshipped = [
            f for f in files
            if "__pycache__" not in f and f != "__init__.py"
            and not any(fnmatch.fnmatch(f, pattern) or pattern == "**/*" for pattern in patterns)
        ]  # fmt: skip
        assert not unshipped, f"{folder}/ files the wheel would lack: {unshipped}"
