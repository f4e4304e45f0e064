"""The layers inside `evertune/` hold: infra imports no layer above it, domain imports neither the
applications nor a service, and no service imports the applications (README, Layout)."""

from __future__ import annotations

import ast

import pytest

from evertune.infra import repository

SERVICES = ("gateway", "profiler", "sla_monitor", "searcher", "runner", "deployer")
#: For each layer: the packages its modules must never import.
FORBIDDEN = {
    "evertune/infra": ("evertune.domain", "evertune.apps", *(f"evertune.{s}" for s in SERVICES)),
    "evertune/domain": ("evertune.apps", *(f"evertune.{s}" for s in SERVICES)),
    "services": ("evertune.apps",),
}


def imported_modules(source: str) -> set[str]:
    """Every absolute module a Python source imports, at any depth (function-level imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def violations(layer: str) -> list[str]:
    out = []
    for path in sorted((repository.ROOT / layer).rglob("*.py")):
        for module in sorted(imported_modules(path.read_text())):
            if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN[layer]):
                out.append(f"{path.relative_to(repository.ROOT)} imports {module}")
    return out


def test_imported_modules_sees_every_form() -> None:
    source = "import a.b\nfrom c import d\nfrom .e import f\ndef g():\n    from h.i import j\n"
    assert imported_modules(source) == {"a.b", "c", "c.d", "h.i", "h.i.j"}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    assert (repository.ROOT / layer).is_dir()
    assert violations(layer) == []
