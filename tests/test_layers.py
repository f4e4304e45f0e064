"""The layers inside `evertune/` hold: infra imports no layer above it, domain imports neither the
applications nor a service, and no service imports the applications (README, Layout); and the
command line lives in the applications: no module of domain/ or infra/ parses arguments, prints to
stdout or exits the process, except the few that are a process of their own (`python -m`)."""

from __future__ import annotations

import ast

import pytest

from tests import checkout

SERVICES = ("gateway", "profiler", "sla_monitor", "searcher", "runner", "deployer")
#: For each layer: the packages its modules must never import.
FORBIDDEN = {
    "evertune/infra": ("evertune.domain", "evertune.apps", *(f"evertune.{s}" for s in SERVICES)),
    "evertune/domain": ("evertune.apps", *(f"evertune.{s}" for s in SERVICES)),
    # the client library stays light: grpcio, protobuf and the wire types, no engine or store code
    "evertune/client": ("evertune.domain", "evertune.apps", *(f"evertune.{s}" for s in SERVICES)),
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
    for path in sorted((checkout.ROOT / layer).rglob("*.py")):
        for module in sorted(imported_modules(path.read_text())):
            if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN[layer]):
                out.append(f"{path.relative_to(checkout.ROOT)} imports {module}")
    return out


def test_imported_modules_sees_every_form() -> None:
    source = "import a.b\nfrom c import d\nfrom .e import f\ndef g():\n    from h.i import j\n"
    assert imported_modules(source) == {"a.b", "c", "c.d", "h.i", "h.i.j"}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    assert (checkout.ROOT / layer).is_dir()
    assert violations(layer) == []


#: Modules of domain/ and infra/ that are a process of their own, started as `python -m`, not a
#: command of `evertune` (those live in evertune/apps/cli): they may parse arguments and print.
PROCESS_ENTRY_POINTS = {
    "evertune/domain/perfmodel/server.py": "the sim engine's server, which `SimEngine` starts",
    "evertune/infra/protogen.py": "`make proto`: regenerates the gRPC stubs",
    "evertune/infra/llama_cpp_build.py": "`make engines`: builds llama.cpp",
    "evertune/infra/child_guard.py": "the guard every child process starts through (its exec)",
}


def command_line_uses(source: str) -> set[str]:
    """What in a Python source belongs to a command line: parsing arguments (`argparse`), printing
    to stdout (`print` without `file=`), exiting the process (`sys.exit`, `exit`, `quit`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "argparse" for a in node.names):
            found.add("argparse")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "argparse":
            found.add("argparse")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "print":
                if not any(k.arg == "file" for k in node.keywords):
                    found.add("print to stdout")
            elif isinstance(func, ast.Name) and func.id in ("exit", "quit"):
                found.add(f"{func.id}()")
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "exit"
                and isinstance(func.value, ast.Name)
                and func.value.id == "sys"
            ):
                found.add("sys.exit")
    return found


def command_line_modules() -> list[str]:
    out = []
    for layer in ("evertune/domain", "evertune/infra"):
        for path in sorted((checkout.ROOT / layer).rglob("*.py")):
            name = str(path.relative_to(checkout.ROOT))
            uses = command_line_uses(path.read_text())
            if uses and name not in PROCESS_ENTRY_POINTS:
                out.append(f"{name}: {', '.join(sorted(uses))} (a command belongs in evertune/apps/cli)")
    return out


def test_command_line_uses_sees_each_form() -> None:
    source = "import argparse\nimport sys\nprint('x')\nprint('y', file=sys.stderr)\nsys.exit(1)\nexit(2)\n"
    assert command_line_uses(source) == {"argparse", "print to stdout", "sys.exit", "exit()"}
    assert command_line_uses("from argparse import ArgumentParser\n") == {"argparse"}
    assert command_line_uses("import sys\nprint('n', file=sys.stderr)\nconsole.print('rich')\n") == set()


def test_domain_and_infra_hold_no_command_line() -> None:
    assert command_line_modules() == []


def test_each_process_entry_point_is_one() -> None:
    """The allowed ones still exist and run as `python -m` (else they leave the list)."""
    for name in PROCESS_ENTRY_POINTS:
        source = (checkout.ROOT / name).read_text()
        assert 'if __name__ == "__main__":' in source, name
