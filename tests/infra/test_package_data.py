"""What evertune reads at run time is package data: in this editable install it is the checkout's
own `infra/` and `proto/` (one source), and pyproject.toml ships every file of them in the wheel
(`.ci/wheel-check` builds and runs that wheel)."""

from __future__ import annotations

import fnmatch
import glob
import subprocess
import tomllib
from pathlib import Path

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


def _shipped(root: Path, patterns: list[str], excluded: list[str]) -> set[str]:
    """The files under `root` setuptools packs for these package-data and exclude patterns (it
    globs the disk recursively, git or not)."""
    found = {f for pattern in patterns for f in glob.glob(pattern, root_dir=root, recursive=True)}
    files = {f for f in found if (root / f).is_file()}
    names = [p.removeprefix("**/") for p in excluded]
    return {f for f in files if not any(fnmatch.fnmatch(Path(f).name, name) for name in names)}


def _tracked(folder: str) -> set[str]:
    """The files git holds under `folder`, relative to it."""
    listed = subprocess.run(
        ["git", "ls-files", folder], cwd=checkout.ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {name.removeprefix(f"{folder}/") for name in listed}


def test_pyproject_ships_every_file_of_the_data_packages_and_no_made_secret(tmp_path: Path) -> None:
    tool = tomllib.loads((checkout.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, folder in (("evertune.definitions", "infra"), ("evertune.contracts", "proto")):
        assert package in tool["packages"] and tool["package-dir"][package] == folder
        shipped = _shipped(
            checkout.ROOT / folder,
            tool["package-data"][package],
            tool.get("exclude-package-data", {}).get(package, []),
        )
        # (its __init__.py is the package itself; a dotfile such as secrets/.gitignore stays home)
        wanted = {f for f in _tracked(folder) if f != "__init__.py" and not Path(f).name.startswith(".")}
        unshipped = sorted(wanted - shipped)
        assert not unshipped, f"{folder}/ files the wheel would lack: {unshipped}"
    # secrets made beside the templates, NATS passwords where `evertune nats credentials` wrote them
    made = [
        "kubernetes/overlays/production/secrets/gateway.env",
        "nats/nats-authorization.conf",
        "nats/nats-gateway.password",
        "kubernetes/overlays/production/secrets/nats-server.key",
    ]
    for name in [*made, "nats/jetstream.toml", "kubernetes/overlays/production/secrets/gateway.env.example"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    shipped = _shipped(
        tmp_path,
        tool["package-data"]["evertune.definitions"],
        tool["exclude-package-data"]["evertune.definitions"],
    )
    assert shipped == {"nats/jetstream.toml", "kubernetes/overlays/production/secrets/gateway.env.example"}


def test_pyproject_lists_every_package() -> None:
    """Every folder with an `__init__.py` is a listed package (a wheel lacked the personas)."""
    tool = tomllib.loads((checkout.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for package, folder in tool["package-dir"].items():
        for init in (checkout.ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(checkout.ROOT / folder).parts
            if not any(part.startswith((".", "__")) for part in relative):
                found.add(".".join((package, *relative)))
    assert sorted(found - set(tool["packages"])) == []
