"""CI: evertune installed from its wheel, outside the checkout, as a platform team's first run:
`evertune up`, `evertune status`, an endpoint on the sim engine, a chat request through the gateway,
`evertune endpoints list`, then Ctrl-C. Run by `.ci/wheel-check` with the fresh environment's
python, from a folder outside the checkout: `python wheel_smoke.py DATA_DIR`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

#: `evertune up` stops by itself after this long should the smoke hang (it stops it sooner).
UP_DURATION_S = 120
#: Free ports for every listener (the tests' choice too: tests/apps/cli/helpers.py `cli_env`).
PORTS = (
    "DEPLOYER_GRPC_PORT", "SEARCHER_GRPC_PORT", "GATEWAY_PORT", "PROFILER_METRICS_PORT",
    "SLA_MONITOR_METRICS_PORT", "SEARCHER_METRICS_PORT", "RUNNER_METRICS_PORT", "DEPLOYER_METRICS_PORT",
)  # fmt: skip


def main(data_dir: Path) -> None:
    import importlib.util

    import evertune

    where = Path(evertune.__file__).resolve()
    assert "site-packages" in where.parts, f"evertune imported from {where}, not the installed wheel"
    missing = [name for name in ("torch", "vllm") if importlib.util.find_spec(name) is None]
    assert missing == ["torch", "vllm"], f"a plain install should have neither torch nor vLLM: {missing}"
    cli = str(Path(sys.executable).parent / "evertune")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVERTUNE_")}
    env.update({f"EVERTUNE_{name}": "0" for name in PORTS}, EVERTUNE_LOG_LEVEL="warning")
    started = time.monotonic()
    up = subprocess.Popen(
        [cli, "up", "--data-dir", str(data_dir), "--duration", str(UP_DURATION_S)],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_ready(up)
        print(f"wheel smoke: up ready in {time.monotonic() - started:.1f} s", flush=True)
        run = _runner(cli, env, data_dir)
        states = {s["name"]: s["state"] for s in run("status")["services"]}
        assert set(states.values()) == {"running"}, states
        model = next(p.parent for p in (data_dir / "models").glob("*/config.json"))
        run("endpoints", "create", "smoke", "--model", str(model), "--engine", "sim", "--hardware",
            "sim-cpu", "--ttft-p99-ms", "500")  # fmt: skip
        _until(lambda: run("endpoints", "get", "smoke")["state"] == "ENDPOINT_STATE_READY", "endpoint ready")
        runtime = json.loads((data_dir / "runtime.json").read_text())
        gateway = runtime["metrics"]["gateway"].removesuffix("/metrics")
        _chat(gateway, "smoke")
        listed = run("endpoints", "list")
        assert "smoke" in json.dumps(listed), listed
        print(
            f"wheel smoke: status, endpoint, a request, list: {time.monotonic() - started:.1f} s", flush=True
        )
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=60)
    assert code == 0, f"evertune up exited with {code}"
    print(f"wheel smoke: passed in {time.monotonic() - started:.1f} s (evertune from {where.parent})")


def _wait_ready(up: subprocess.Popen[str]) -> None:
    assert up.stdout is not None
    for line in up.stdout:
        if line.startswith("ready in"):
            return
    raise AssertionError(f"evertune up exited before it was ready (code {up.wait()})")


def _runner(cli: str, env: dict[str, str], data_dir: Path) -> Any:
    def run(*args: str) -> Any:
        done = subprocess.run(
            [cli, *args, "--data-dir", str(data_dir), "--json"], env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, f"evertune {' '.join(args)}: {done.stderr.strip()}"
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run


def _until(check: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} in {timeout_s:.0f} s")
        time.sleep(0.5)


def _chat(gateway: str, endpoint: str) -> None:
    body = {"model": endpoint, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
    request = urllib.request.Request(
        f"{gateway}/v1/chat/completions",
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200, response.status
        assert b"[DONE]" in response.read()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
