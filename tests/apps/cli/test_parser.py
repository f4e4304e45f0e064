"""The parser: every command runs a function it declared beside its options, and building it (what
`evertune --help` does) imports no torch, so the light commands start fast."""

from __future__ import annotations

import argparse
import subprocess
import sys

from evertune.apps.cli import build_parser


def command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every runnable command: the leaves of the sub-parser tree."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [path]
    return [p for name, sub in subs[0].choices.items() for p in command_paths(sub, (*path, name))]


def test_every_command_names_the_function_that_runs_it() -> None:
    parser = build_parser()
    paths = command_paths(parser)
    assert ("up",) in paths and ("model", "calibrate") in paths and ("events", "tail") in paths
    for path in paths:
        sub, funcs = parser, []
        for name in path:  # a group's default reaches its sub-commands
            action = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction))
            sub = action.choices[name]
            funcs.append(sub.get_default("func"))
        assert any(callable(func) for func in funcs), path


def test_building_the_parser_imports_no_torch() -> None:
    script = "\n".join(
        (
            "import sys",
            "from evertune.apps.cli import build_parser",
            "build_parser()",
            "print('torch' in sys.modules)",
        )
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
