"""`evertune bench <name> [--quick] [--json]`: the home of every benchmark.

While one runs, a line on stderr says what it is doing (its `step`s) and for how long, on a
terminal only; stdout holds the figures alone (with `--json`, one JSON object on the last line).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from evertune.apps.benchmarks import BENCHMARKS, Figures, get_benchmark, showing_steps
from evertune.apps.cli.common import Commands, shared_settings
from evertune.apps.cli.console import err_console, out_console, table


def step_count(done: int, total: int) -> str:
    """`done/total` of a counted step; "" when not counted."""
    return f"{done}/{total}" if total else ""


def run_showing_steps(name: str, quick: bool, *, console: Console) -> Figures:
    """Run benchmark `name`, its steps and elapsed time drawn on `console` (a terminal only)."""
    benchmark = get_benchmark(name)
    with Progress(
        SpinnerColumn(),
        TextColumn(f"bench {name}:"),
        TextColumn("{task.description}"),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
        redirect_stdout=False,  # stdout holds the figures alone
    ) as bar:
        task = bar.add_task("starting", total=None, count="")

        def show(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, count=step_count(done, total))

        with showing_steps(show):
            return asyncio.run(benchmark(quick))


def add_commands(commands: Commands) -> None:
    """`evertune bench <name>`."""
    parser = commands.add_parser(
        "bench", help="run a benchmark; with --json the last line is one JSON object"
    )
    parser.add_argument("name", help="benchmark name (`evertune bench list` lists them)")
    parser.add_argument("--quick", action="store_true", help="a short run, for smoke checks")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON figures")
    parser.set_defaults(func=bench_command)


def bench_command(args: argparse.Namespace) -> int:
    return bench(args.name, quick=args.quick, as_json=args.json)


def bench(name: str, *, quick: bool, as_json: bool) -> int:
    shared_settings(None, log_format="console")
    out = out_console()
    if name == "list":
        listed = table("NAME", "WHAT IT MEASURES")
        for key, (_, _, description) in sorted(BENCHMARKS.items()):
            listed.add_row(key, description)
        out.print(listed)
        return 0
    figures = run_showing_steps(name, quick, console=err_console())
    if as_json:
        print(json.dumps(figures))
        return 0
    shown = table("FIGURE", "VALUE")
    for key, value in figures.items():
        shown.add_row(key, str(value))
    out.print(shown)
    return 0
