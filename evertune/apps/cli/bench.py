"""`evertune bench <name> [--quick] [--json]`: the home of every benchmark."""

from __future__ import annotations

import asyncio
import json

from evertune.apps.benchmarks import BENCHMARKS, get_benchmark
from evertune.apps.cli.common import shared_settings


def bench(name: str, *, quick: bool, as_json: bool) -> int:
    shared_settings(None, log_format="console")
    if name == "list":
        for key, (_, _, description) in sorted(BENCHMARKS.items()):
            print(f"{key:<10} {description}")
        return 0
    figures = asyncio.run(get_benchmark(name)(quick))
    if not as_json:
        for key, value in figures.items():
            print(f"{key:<28} {value}")
        return 0
    print(json.dumps(figures))
    return 0
